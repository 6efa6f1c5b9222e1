#!/usr/bin/env python3
"""prepare_corpus.py — builds the demo model's plain-text corpus from Debian packages.

Run on a Debian machine that can reach the Debian archive (root not needed for
`apt-get download`). It fetches three public-domain English texts packaged by Debian,
extracts them with dpkg-deb, cleans them and writes:

  OUT/text.jsonl     one document per line: {"source", "title", "text"}
  OUT/entries.jsonl  dictionary entries: {"source", "term", "definition"}
  OUT/sources.json   package names, versions and what was taken from each

Sources (all public domain, see each package's copyright file):
  bible-kjv-text  King James Version of the Bible (1611); decoded with the
                  `bible` program from the bible-kjv package
  dict-devil      Ambrose Bierce, The Devil's Dictionary (1911)
  jargon-text     The Jargon File 4.4.7 (placed in the public domain by its editor)

Usage: prepare_corpus.py OUT_DIR
"""
import glob
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

PACKAGES = ["bible-kjv-text", "bible-kjv", "dict-devil", "jargon-text"]

# Typographic characters folded to ASCII so a small vocabulary is not spent on them.
FOLD = {
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-",
    "\u2014": "--", "\u2026": "...", "\u00a0": " ", "\u00b7": "-",
}


def fold(text):
    for k, v in FOLD.items():
        text = text.replace(k, v)
    return text


def run(cmd, cwd=None):
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout


def fetch(work):
    """Downloads and unpacks each package; returns {name: (version, root)}."""
    run(["apt-get", "download"] + PACKAGES, cwd=work)
    got = {}
    for name in PACKAGES:
        debs = glob.glob(os.path.join(work, name + "_*.deb"))
        if len(debs) != 1:
            sys.exit("prepare_corpus: expected one .deb for %s, found %d" % (name, len(debs)))
        version = run(["dpkg-deb", "-f", debs[0], "Version"]).strip()
        root = os.path.join(work, "x", name)
        os.makedirs(root, exist_ok=True)
        run(["dpkg-deb", "-x", debs[0], root])
        got[name] = (version, root)
    return got


def kjv_documents(got):
    """One document per chapter: the title line, then one verse per line."""
    prog = os.path.join(got["bible-kjv"][1], "usr/bin/bible")
    data = os.path.join(got["bible-kjv-text"][1], "usr/lib")
    raw = run([prog, "-p", data, "gen1:1-rev22:21"])
    docs, title, verses = [], None, []
    for line in raw.split("\n"):
        m = re.match(r"^([1-3]?\s?[A-Z][A-Za-z ]+ \d+)$", line.strip())
        if m and not line.startswith(" "):
            if title and verses:
                docs.append({"source": "kjv", "title": title, "text": "\n".join(verses)})
            title, verses = m.group(1), []
            continue
        v = re.match(r"^\s+(\d+) (.*)$", line)
        if v:
            verses.append(v.group(2).strip())
        elif line.strip() and verses:
            verses[-1] += " " + line.strip()  # wrapped continuation of a verse
    if title and verses:
        docs.append({"source": "kjv", "title": title, "text": "\n".join(verses)})
    return docs


def unwrap(lines):
    """Joins hard-wrapped lines into paragraphs; indented verse keeps its lines."""
    paras, cur = [], []
    for line in lines + [""]:
        if not line.strip():
            if cur:
                paras.append(cur)
            cur = []
            continue
        cur.append(line)
    out = []
    for p in paras:
        if all(l.startswith("    ") for l in p):
            out.append("\n".join(l.strip() for l in p))
        else:
            out.append(" ".join(l.strip() for l in p))
    return out


def devil_documents(got):
    path = os.path.join(got["dict-devil"][1], "usr/share/dictd/devil.dict.dz")
    with gzip.open(path, "rt", encoding="latin-1") as f:
        raw = fold(f.read())
    start = raw.index("ABASEMENT, n.")
    body = raw[start:].split("\n")
    head = re.compile(r"^([A-Z][A-Z' .-]+?),\s+([a-z. ]+?)\.\s+(.*)$")
    docs, entries, cur = [], [], []

    def flush():
        if not cur:
            return
        paras = unwrap(cur)
        text = "\n\n".join(paras)
        m = head.match(paras[0])
        if m:
            entries.append({"source": "devil", "term": m.group(1).strip().capitalize(),
                            "definition": m.group(3).strip()})
        docs.append({"source": "devil", "title": "The Devil's Dictionary", "text": text})

    for line in body:
        if head.match(line) or re.match(r"^[A-Z][A-Z' -]+\.$", line):
            flush()
            cur = []
        cur.append(line.rstrip())
    flush()
    # Entries are short; group them in runs so a document has some length.
    grouped = []
    for i in range(0, len(docs), 12):
        grouped.append({"source": "devil", "title": "The Devil's Dictionary",
                        "text": "\n\n".join(d["text"] for d in docs[i:i + 12])})
    return grouped, entries


def jargon_documents(got):
    path = os.path.join(got["jargon-text"][1], "usr/share/doc/jargon-text/jargon.txt.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = fold(f.read())
    lines = [l for l in raw.split("\n") if not re.search(r"[\u2500-\u257f]", l)]
    head = re.compile(r"^   :([^:]+):\s*(.*)$")
    docs, entries, term, cur = [], [], None, []

    def clean(s):
        return re.sub(r"\{([^}]*)\}", r"\1", s)

    def flush():
        if term is None or not cur:
            return
        paras = [clean(p) for p in unwrap(cur)]
        paras = [p for p in paras if p]
        if not paras:
            return
        docs.append({"source": "jargon", "title": term, "text": term + ": " + "\n\n".join(paras)})
        first = next((p for p in paras if not p.startswith("[") and len(p) > 20), None)
        if first:
            first = re.sub(r"^(1\. |\[[^\]]*\]\s*)", "", first)
            entries.append({"source": "jargon", "term": term, "definition": first})

    started = False
    for line in lines:
        m = head.match(line)
        if m:
            flush()
            started, term, cur = True, m.group(1).strip(), []
            continue
        if started:
            cur.append(line)
    flush()
    return docs, entries


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        got = fetch(work)
        kjv = kjv_documents(got)
        devil, devil_entries = devil_documents(got)
        jargon, jargon_entries = jargon_documents(got)
    docs = kjv + devil + jargon
    with open(os.path.join(out, "text.jsonl"), "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "entries.jsonl"), "w", encoding="utf-8") as f:
        for e in devil_entries + jargon_entries:
            f.write(json.dumps(e, ensure_ascii=False) + "\n")
    sizes = {}
    for d in docs:
        sizes[d["source"]] = sizes.get(d["source"], 0) + len(d["text"])
    meta = {
        "packages": {name: got[name][0] for name in PACKAGES},
        "documents": {s: sum(1 for d in docs if d["source"] == s) for s in sizes},
        "characters": sizes,
        "entries": {"devil": len(devil_entries), "jargon": len(jargon_entries)},
    }
    with open(os.path.join(out, "sources.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
