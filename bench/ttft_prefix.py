#!/usr/bin/env python3
"""Time to first token with and without a cached prefix, against `ember serve`
(standard library only, loopback only).

Each round makes a fresh prefix of about --prefix-words words (its own seed,
so nothing of it is cached yet), sends prefix + question A (cold: the whole
prompt is prefilled) and then prefix + question B (the prefix's KV blocks are
reused; only the tail is prefilled). Round 0 warms the server and is not
counted. Reports the median cold and cached TTFT, their ratio, and the
prompt / cached token counts the server reported in usage.

Requests go over one kept-alive HTTP/1.1 connection, as the OpenAI and
Anthropic SDKs send them (their clients pool connections);
--new-connection opens one per request instead (HTTP/1.0), which adds the
connection's set-up to every time measured.

  python3 bench/ttft_prefix.py --url http://127.0.0.1:8080 --prefix-words 1500 --rounds 5 [--seed N] [--json]
"""
import argparse, json, random, socket, statistics, time, urllib.parse

ap = argparse.ArgumentParser()
ap.add_argument("--url", default="http://127.0.0.1:8080")
ap.add_argument("--prefix-words", type=int, default=1500)
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--json", action="store_true")
ap.add_argument("--seed", type=int, default=0, help="another seed makes other prefixes (a second run against the same server)")
ap.add_argument("--new-connection", action="store_true", help="a new connection per request (HTTP/1.0)")
a = ap.parse_args()
u = urllib.parse.urlparse(a.url)
if u.hostname not in ("127.0.0.1", "localhost", "::1"):
    raise SystemExit("ttft_prefix: only loopback targets are allowed")
WORDS = ("apple river stone cloud garden light window music paper silver ocean forest story winter bridge "
         "north candle market yellow engine valley thunder copper lantern meadow harbor").split()


class Conn:
    """One HTTP connection that reads a response to its end: by
    Content-Length, by chunks (HTTP/1.1 streams) or to the close."""

    def __init__(self):
        self.s, self.buf = None, b""

    def open(self):
        self.s = socket.create_connection((u.hostname, u.port or 80), timeout=600)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        if self.s:
            self.s.close()
        self.s = None

    def more(self):
        d = self.s.recv(1 << 16)
        if not d:
            raise EOFError
        self.buf += d

    def take(self, n):
        while len(self.buf) < n:
            self.more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def line(self):
        while b"\r\n" not in self.buf:
            self.more()
        out, self.buf = self.buf.split(b"\r\n", 1)
        return out

    def request(self, raw, on_body):
        """Sends raw; feeds each piece of the body to on_body as it
        arrives; returns (status line, headers dict, body bytes)."""
        self.s.sendall(raw)
        status = self.line()
        self.t_status = time.perf_counter()
        headers = {}
        while True:
            ln = self.line()
            if not ln:
                break
            k, _, v = ln.partition(b":")
            headers[k.strip().lower()] = v.strip().lower()
        body = b""
        if headers.get(b"transfer-encoding") == b"chunked":
            while True:
                size = int(self.line().split(b";")[0], 16)
                if size == 0:
                    while self.line():  # trailers, then the blank line
                        pass
                    break
                piece = self.take(size)
                self.take(2)
                body += piece
                on_body(body)
        elif b"content-length" in headers:
            body = self.take(int(headers[b"content-length"]))
            on_body(body)
        else:
            try:
                while True:
                    self.more()
                    body += self.buf
                    self.buf = b""
                    on_body(body)
            except EOFError:
                pass
            self.close()
        if headers.get(b"connection") == b"close":
            self.close()
        return status, headers, body


conn = Conn()


def ttft(prompt):
    """(seconds to the first streamed choice, prompt_tokens, cached_tokens).

    A plain socket (TCP_NODELAY) and a byte scan for the first event:
    http.client's line reading added about a millisecond to every request,
    as much as a cached prefill takes."""
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True, "ignore_eos": True,
                       "stream_options": {"include_usage": True}}).encode()
    version = "1.0" if a.new_connection else "1.1"
    head = (f"POST /v1/completions HTTP/{version}\r\nHost: {u.hostname}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    if a.new_connection or conn.s is None:
        conn.close()
        conn.open()
    first = [None]
    t0 = time.perf_counter()

    def seen(sofar):
        if first[0] is None and b'"choices":[{' in sofar:
            first[0] = time.perf_counter() - t0

    status, _, data = conn.request(head + body, seen)
    if a.new_connection:
        conn.close()
    if b" 200 " not in status + b" ":
        raise SystemExit(f"ttft_prefix: {status!r}: {data[:300]!r}")
    prompt_tokens, cached = None, None
    for line in data.split(b"\n"):
        if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
            continue
        us = json.loads(line[5:]).get("usage")
        if us:
            prompt_tokens = us.get("prompt_tokens")
            cached = (us.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    ttft.head_s = conn.t_status - t0  # the status line: the request was parsed and queued
    return first[0], prompt_tokens, cached


cold, warm, rows = [], [], []
for rnd in range(a.rounds + 1):
    rng = random.Random(rnd * 7919 + 1 + a.seed * 1000003)
    prefix = " ".join(rng.choice(WORDS) + str(rng.randrange(100)) for _ in range(a.prefix_words))
    c = ttft(prefix + " First question: what comes next?")
    h = ttft(prefix + " Second question: and after that?")
    rows.append({"round": rnd, "cold_ms": c[0] * 1e3, "cached_ms": h[0] * 1e3, "cached_head_ms": ttft.head_s * 1e3,
                 "prompt_tokens": h[1],
                 "cached_tokens": h[2], "cold_cached_tokens": c[2]})
    if rnd:
        cold.append(c[0])
        warm.append(h[0])
res = {"connection": "new per request" if a.new_connection else "kept alive", "prefix_words": a.prefix_words, "rounds": a.rounds, "prompt_tokens": rows[-1]["prompt_tokens"],
       "cached_tokens": rows[-1]["cached_tokens"], "ttft_cold_ms": statistics.median(cold) * 1e3,
       "ttft_cached_ms": statistics.median(warm) * 1e3}
res["ratio"] = res["ttft_cached_ms"] / res["ttft_cold_ms"]
if a.json:
    print(json.dumps({"summary": res, "rounds": rows}))
else:
    for r in rows:
        print(f"round {r['round']}: cold {r['cold_ms']:.1f} ms ({r['cold_cached_tokens']} cached), "
              f"cached {r['cached_ms']:.1f} ms ({r['cached_tokens']} of {r['prompt_tokens']} tokens cached; "
              f"its response head after {r['cached_head_ms']:.2f} ms)"
              + ("  [warm-up, not counted]" if r["round"] == 0 else ""))
    print(f"median TTFT: cold {res['ttft_cold_ms']:.1f} ms, cached prefix {res['ttft_cached_ms']:.1f} ms "
          f"= {100 * res['ratio']:.1f}% ({res['cached_tokens']} of {res['prompt_tokens']} prompt tokens cached; "
          f"connection {res['connection']})")
