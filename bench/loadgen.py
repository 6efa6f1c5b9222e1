#!/usr/bin/env python3
"""Load generator for `ember serve` with the standard library only (for hosts
without Node.js): N concurrent streaming chat clients, loopback only, bounded
in requests; reports requests/s, output tokens/s, TTFT and inter-token
latency percentiles. Same report as bench/loadgen.mjs.

  python3 bench/loadgen.py --url http://127.0.0.1:8080 --clients 8 --requests 32 \\
      --prompt-words 200 --max-tokens 64 [--shared 0.5] [--temperature 0.7 --top-p 0.9 --top-k 40]

Greedy by default; --temperature > 0 samples (each request seeded by its
index, so runs are repeatable), with --top-p / --top-k when given.
"""
import argparse, http.client, json, threading, time, urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("--url", default="http://127.0.0.1:8080")
ap.add_argument("--clients", type=int, default=8)
ap.add_argument("--requests", type=int, default=32)
ap.add_argument("--prompt-words", type=int, default=200)
ap.add_argument("--max-tokens", type=int, default=64)
ap.add_argument("--shared", type=float, default=0.0)
ap.add_argument("--temperature", type=float, default=0.0)
ap.add_argument("--top-p", type=float, default=None)
ap.add_argument("--top-k", type=int, default=None)
ap.add_argument("--json", action="store_true")
a = ap.parse_args()
u = urllib.parse.urlparse(a.url)
if u.hostname not in ("127.0.0.1", "localhost", "::1"):
    raise SystemExit("loadgen: only loopback targets are allowed")
VOCAB = "apple river stone cloud garden light window music paper silver ocean forest story winter bridge".split()
shared_n = round(a.prompt_words * max(0.0, min(1.0, a.shared)))
preamble = " ".join(VOCAB[(i * 7) % len(VOCAB)] for i in range(shared_n))


def prompt(i):
    own = [VOCAB[(i * 31 + k * 13) % len(VOCAB)] for k in range(a.prompt_words - shared_n)]
    return f"{preamble} {i} {' '.join(own)}".strip()


def one(i):
    req = {"messages": [{"role": "user", "content": prompt(i)}], "max_tokens": a.max_tokens,
           "temperature": a.temperature, "stream": True, "ignore_eos": True,
           "stream_options": {"include_usage": True}}
    if a.temperature > 0:
        req["seed"] = i
        if a.top_p is not None:
            req["top_p"] = a.top_p
        if a.top_k is not None:
            req["top_k"] = a.top_k
    body = json.dumps(req)
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]}")
    times, usage = [], None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        d = json.loads(line[6:])
        if d.get("usage"):
            usage = d["usage"]
        if any((ch.get("delta") or {}).get("content") for ch in d.get("choices", [])):
            times.append(time.perf_counter())
    c.close()
    return t0, times, usage


results, errors, lock, nxt = [], [0], threading.Lock(), [0]


def worker():
    while True:
        with lock:
            i = nxt[0]
            nxt[0] += 1
        if i >= a.requests:
            return
        try:
            res = one(i)
            with lock:
                results.append(res)
        except Exception as e:  # noqa: BLE001
            with lock:
                errors[0] += 1
            print("error:", e)


start = time.perf_counter()
ts = [threading.Thread(target=worker) for _ in range(a.clients)]
for t in ts:
    t.start()
for t in ts:
    t.join()
wall = time.perf_counter() - start


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))] if v else float("nan")


ttft = [(t[0] - t0) * 1000 for t0, t, _ in results if t]
itl = [(b - a_) * 1000 for _, t, _ in results for a_, b in zip(t, t[1:])]
out_tok = sum((u or {}).get("completion_tokens", len(t)) for _, t, u in results)
rep = {"clients": a.clients, "requests": len(results), "errors": errors[0], "wall_s": round(wall, 2),
       "requests_per_s": round(len(results) / wall, 3), "output_tokens_per_s": round(out_tok / wall, 2),
       "ttft_ms_p50": round(pct(ttft, 50), 1), "ttft_ms_p99": round(pct(ttft, 99), 1),
       "itl_ms_p50": round(pct(itl, 50), 2), "itl_ms_p99": round(pct(itl, 99), 2),
       "cached_prompt_tokens": sum(((u or {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                                   for _, _, u in results)}
print(json.dumps(rep) if a.json else "\n".join(f"{k:22} {v}" for k, v in rep.items()))
raise SystemExit(1 if errors[0] else 0)
