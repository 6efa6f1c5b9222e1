#!/usr/bin/env python3
"""Reference renderer for ember's chat templates: jinja2 configured the way
transformers configures it (ImmutableSandboxedEnvironment with trim_blocks,
lstrip_blocks and loop controls; its tojson filter; raise_exception and
strftime_now globals; the context apply_chat_template builds).

  jinja_render.py DIR --request FILE [--now SECONDS]
      prints the prompt byte for byte; exit 1 with the message on error
  jinja_render.py --batch FILE.jsonl [--now SECONDS]
      each line {"template", "vars", "config"} -> {"ok", "output"|"error"}

Standard library + jinja2 only."""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %} tag: renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def make_env(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        t = datetime.fromtimestamp(now) if now else datetime.now()
        return t.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(v):
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]
    return None


def special_tokens(config):
    out = {}
    if not isinstance(config, dict):
        return out
    for name in SPECIAL:
        t = token_text(config.get(name))
        if t:
            out[name] = t
    extra = config.get("additional_special_tokens")
    if isinstance(extra, list):
        out["additional_special_tokens"] = [t for t in map(token_text, extra) if t is not None]
    return out


def pick_template(entry):
    if isinstance(entry, str):
        return entry
    if isinstance(entry, list):
        for e in entry:
            if isinstance(e, dict) and e.get("name") == "default":
                return e["template"]
        raise ValueError("chat_template list has no template named \"default\"")
    raise ValueError("chat_template must be a string or a list")


def load_dir(d):
    config = None
    cfg_path = os.path.join(d, "tokenizer_config.json")
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            config = json.load(f)
    jinja_path = os.path.join(d, "chat_template.jinja")
    json_path = os.path.join(d, "chat_template.json")
    if os.path.exists(jinja_path):
        with open(jinja_path, encoding="utf-8", newline="") as f:
            return f.read(), config
    if os.path.exists(json_path):
        with open(json_path, encoding="utf-8") as f:
            return pick_template(json.load(f)["chat_template"]), config
    if config and "chat_template" in config:
        return pick_template(config["chat_template"]), config
    raise ValueError("no chat template")


def render(env, source, config, variables):
    ctx = {"tools": None, "documents": None, "add_generation_prompt": False}
    ctx.update(special_tokens(config))
    ctx.update(variables or {})
    return env.from_string(source).render(**ctx)


def main(argv):
    now = int(os.environ.get("EMBER_TEMPLATE_NOW", "0") or 0)
    args, i = [], 1
    opts = {}
    while i < len(argv):
        if argv[i] in ("--request", "--batch", "--now"):
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if "--now" in opts:
        now = int(opts["--now"])
    env = make_env(now)
    if "--batch" in opts:
        with open(opts["--batch"], encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                case = json.loads(line)
                try:
                    out = render(env, case["template"], case.get("config"), case.get("vars"))
                    res = {"ok": True, "output": out}
                except Exception as e:  # every jinja2 failure is a failed render
                    res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                sys.stdout.write(json.dumps(res) + "\n")
        return 0
    if len(args) != 1 or "--request" not in opts:
        sys.stderr.write(__doc__)
        return 2
    with open(opts["--request"], encoding="utf-8") as f:
        variables = json.load(f)
    try:
        source, config = load_dir(args[0])
        out = render(env, source, config, variables)
    except Exception as e:
        sys.stderr.write(f"{type(e).__name__}: {e}\n")
        return 1
    sys.stdout.buffer.write(out.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
