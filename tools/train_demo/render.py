"""render.py — renders conversations with the demo chat template the way
transformers does (sandboxed jinja2, trim_blocks + lstrip_blocks, a tojson that
keeps key order and non-ASCII), and finds the spans the model is trained on."""
import json
import os
import re

import jinja2
import jinja2.ext
import jinja2.sandbox

HERE = os.path.dirname(os.path.abspath(__file__))


def load_template():
    with open(os.path.join(HERE, "chat_template.jinja"), encoding="utf-8") as f:
        return f.read()


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise(msg):
    raise jinja2.exceptions.TemplateError(msg)


def compile_template(source):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    return env.from_string(source)


def render(template, messages, tools=None, add_generation_prompt=False, enable_thinking=None):
    kw = {"messages": messages, "tools": tools, "add_generation_prompt": add_generation_prompt}
    if enable_thinking is not None:
        kw["enable_thinking"] = enable_thinking
    return template.render(**kw)


HEADER = "<|im_start|>assistant\n"
EMPTY_THINK = "<think>\n\n</think>\n\n"
END = "<|im_end|>"


def trained_spans(text):
    """Character spans [start, end) the loss is taken on: every assistant turn
    after the last real user turn, from its first generated character through
    its <|im_end|>. An empty think block belongs to the prompt (the template
    writes it when thinking is off), so a span starts after it."""
    last_user = -1
    for m in re.finditer(re.escape("<|im_start|>user\n"), text):
        if not text.startswith("<tool_response>", m.end()):
            last_user = m.start()
    spans = []
    pos = text.find(HEADER, max(last_user, 0))
    while pos >= 0:
        start = pos + len(HEADER)
        if text.startswith(EMPTY_THINK, start):
            start += len(EMPTY_THINK)
        end = text.find(END, start)
        if end < 0:
            break
        spans.append((start, end + len(END)))
        pos = text.find(HEADER, end)
    return spans
