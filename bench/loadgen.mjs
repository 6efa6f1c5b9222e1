#!/usr/bin/env node
// Load generator for `ember serve` (loopback only, bounded in requests and
// time): N concurrent streaming clients send chat requests with a given
// prompt length, output length and shared-prefix ratio, and the run reports
// requests/s, output tokens/s, TTFT p50/p99 and inter-token latency p50/p99.
//
//   node bench/loadgen.mjs --url http://127.0.0.1:8080 --clients 8 --requests 32 \
//        --prompt-words 200 --max-tokens 64 --shared 0.5 [--api-key K] [--seconds 300]
import { parseArgs } from "node:util";

const { values: o } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8080" },
    clients: { type: "string", default: "8" },
    requests: { type: "string", default: "32" },
    "prompt-words": { type: "string", default: "200" },
    "max-tokens": { type: "string", default: "64" },
    shared: { type: "string", default: "0" },
    seconds: { type: "string", default: "600" },
    "api-key": { type: "string" },
    json: { type: "boolean", default: false },
  },
});
const url = new URL(o.url);
if (!["127.0.0.1", "localhost", "[::1]"].includes(url.hostname)) {
  console.error("loadgen: only loopback targets are allowed");
  process.exit(2);
}
const clients = +o.clients, total = +o.requests, words = +o["prompt-words"];
const maxTokens = +o["max-tokens"], shared = Math.min(1, Math.max(0, +o.shared));
const deadline = Date.now() + 1000 * +o.seconds;
const vocab = "apple river stone cloud garden light window music paper silver ocean forest story winter bridge".split(" ");
const sharedWords = Math.round(words * shared);
const preamble = Array.from({ length: sharedWords }, (_, i) => vocab[(i * 7) % vocab.length]).join(" ");

function prompt(i) {
  const own = Array.from({ length: words - sharedWords }, (_, k) => vocab[(i * 31 + k * 13) % vocab.length]);
  return `${preamble} ${i} ${own.join(" ")}`.trim();
}

async function one(i) {
  const t0 = performance.now();
  const res = await fetch(`${o.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(o["api-key"] ? { authorization: `Bearer ${o["api-key"]}` } : {}) },
    body: JSON.stringify({
      messages: [{ role: "user", content: prompt(i) }],
      max_tokens: maxTokens, temperature: 0, stream: true, ignore_eos: true,
      stream_options: { include_usage: true },
    }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const times = [];
  let usage = null, buf = "";
  const dec = new TextDecoder();
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, nl);
      buf = buf.slice(nl + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const d = JSON.parse(ev.slice(6));
      if (d.usage) usage = d.usage;
      if (d.choices?.some((c) => c.delta?.content || c.delta?.reasoning_content)) times.push(performance.now());
    }
  }
  return { t0, times, end: performance.now(), usage };
}

const pct = (a, p) => (a.length ? a.slice().sort((x, y) => x - y)[Math.min(a.length - 1, Math.floor((p / 100) * a.length))] : NaN);
const results = [];
let next = 0, errors = 0;
const start = performance.now();
await Promise.all(Array.from({ length: clients }, async () => {
  while (next < total && Date.now() < deadline) {
    const i = next++;
    try { results.push(await one(i)); } catch (e) { errors++; console.error(String(e)); }
  }
}));
const wall = (performance.now() - start) / 1000;
const ttft = results.filter((r) => r.times.length).map((r) => r.times[0] - r.t0);
const itl = results.flatMap((r) => r.times.slice(1).map((t, k) => t - r.times[k]));
const outTokens = results.reduce((s, r) => s + (r.usage?.completion_tokens ?? r.times.length), 0);
const cached = results.reduce((s, r) => s + (r.usage?.prompt_tokens_details?.cached_tokens ?? 0), 0);
const promptTokens = results.reduce((s, r) => s + (r.usage?.prompt_tokens ?? 0), 0);
const report = {
  clients, requests: results.length, errors, wall_s: +wall.toFixed(2),
  requests_per_s: +(results.length / wall).toFixed(3), output_tokens_per_s: +(outTokens / wall).toFixed(2),
  ttft_ms_p50: +pct(ttft, 50).toFixed(1), ttft_ms_p99: +pct(ttft, 99).toFixed(1),
  itl_ms_p50: +pct(itl, 50).toFixed(2), itl_ms_p99: +pct(itl, 99).toFixed(2),
  prompt_tokens: promptTokens, cached_prompt_tokens: cached,
};
if (o.json) console.log(JSON.stringify(report));
else for (const [k, v] of Object.entries(report)) console.log(`${k.padEnd(22)} ${v}`);
process.exit(errors ? 1 : 0);
