#!/usr/bin/env python3
"""Turns tests/chat/micro/*.txt into the JSON Lines that `ember template
--batch` and tools/oracle/jinja_render.py --batch read. A case starts with
"### name"; an optional "vars: {json}" line follows; the rest, up to the next
case, is the template (its final newline is not part of it)."""
import json
import sys

for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for block in text.split("\n### ")[1:] if not text.startswith("### ") else ("\n" + text).split("\n### ")[1:]:
        name, _, rest = block.partition("\n")
        variables = {}
        if rest.startswith("vars: "):
            line, _, rest = rest.partition("\n")
            variables = json.loads(line[len("vars: "):])
        if rest.endswith("\n"):
            rest = rest[:-1]
        print(json.dumps({"name": name, "template": rest, "vars": variables}))
