// The official `openai` package against a running `ember serve` (the demo
// model): Chat Completions (plain, streaming, the stream helper's final
// message, tool calls and a tool result, n, stop, seeds, logprobs, usage),
// Completions, the models list, and errors surfacing as the SDK's APIError
// subclasses. Started by tests/server/test_openai_sdk.sh, which sets
// EMBER_BASE_URL and EMBER_API_KEY.
import assert from "node:assert/strict";
import { test } from "node:test";
import OpenAI from "openai";

const baseURL = process.env.EMBER_BASE_URL;
const apiKey = process.env.EMBER_API_KEY;
assert.ok(baseURL && apiKey, "EMBER_BASE_URL and EMBER_API_KEY must be set");
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const MODEL = "demo";
const NO_THINK = { chat_template_kwargs: { enable_thinking: false } };
const WEATHER = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

test("non-streaming chat: shape, text, usage", async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: "user", content: "Hello!" }], temperature: 0, max_tokens: 32, ...NO_THINK,
  });
  assert.equal(r.object, "chat.completion");
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, "assistant");
  assert.ok(c.message.content.length > 0);
  assert.ok(["stop", "length"].includes(c.finish_reason));
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens > 0 && r.usage.completion_tokens <= 32);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test("streaming chat equals the non-streaming reply; usage chunk", async () => {
  const req = { model: MODEL, messages: [{ role: "user", content: "Hello!" }], temperature: 0, max_tokens: 24, ...NO_THINK };
  const full = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = "", role = null, finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      role ??= ch.delta.role ?? null;
      text += ch.delta.content ?? "";
      finish = ch.finish_reason ?? finish;
    }
  }
  assert.ok(chunks > 2);
  assert.equal(role, "assistant");
  assert.equal(text, full.choices[0].message.content);
  assert.equal(finish, full.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, full.usage.completion_tokens);
});

test("stream helper accumulates the final message", async () => {
  const req = { model: MODEL, messages: [{ role: "user", content: "Hello!" }], temperature: 0, max_tokens: 24, ...NO_THINK };
  const full = await client.chat.completions.create(req);
  const runner = client.chat.completions.stream(req);
  let deltas = "";
  runner.on("content", (delta) => { deltas += delta; });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, full.choices[0].message.content);
  assert.equal(deltas, full.choices[0].message.content);
  assert.equal(await runner.finalContent(), full.choices[0].message.content);
});

test("reasoning arrives separately from the answer", async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: "user", content: "Hello!" }], temperature: 0, max_tokens: 96,
    chat_template_kwargs: { enable_thinking: true },
  });
  const m = r.choices[0].message;
  assert.ok(m.reasoning_content && m.reasoning_content.length > 0, "reasoning_content present");
  assert.ok(!m.content.includes("<think>"), "no think markup in the answer");
  assert.ok(r.usage.completion_tokens_details.reasoning_tokens > 0);
});

test("tool call round trip: definitions in, tool_calls out, tool result back", async () => {
  const messages = [{ role: "user", content: "What's the weather in Paris?" }];
  const r = await client.chat.completions.create({ model: MODEL, messages, tools: [WEATHER], temperature: 0, max_tokens: 64 });
  const c = r.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.match(call.id, /^call_/);
  assert.equal(call.function.name, "get_weather");
  assert.deepEqual(JSON.parse(call.function.arguments), { city: "Paris" });

  // The streamed form, accumulated by the SDK's helper, gives the same call.
  const final = await client.chat.completions
    .stream({ model: MODEL, messages, tools: [WEATHER], temperature: 0, max_tokens: 64 })
    .finalChatCompletion();
  const scall = final.choices[0].message.tool_calls[0];
  assert.equal(scall.function.name, "get_weather");
  assert.deepEqual(JSON.parse(scall.function.arguments), { city: "Paris" });

  messages.push(c.message);
  messages.push({ role: "tool", tool_call_id: call.id,
                  content: '{"city": "Paris", "temperature": 18, "unit": "celsius", "condition": "sunny"}' });
  const answer = await client.chat.completions.create({ model: MODEL, messages, tools: [WEATHER], temperature: 0, max_tokens: 64 });
  const a = answer.choices[0];
  assert.equal(a.finish_reason, "stop");
  assert.match(a.message.content, /Paris/);
  assert.match(a.message.content, /18/);
});

test("n > 1 gives n choices, indexed", async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: "user", content: "Tell me a story." }], n: 3, temperature: 1, seed: 11,
    max_tokens: 12, ...NO_THINK,
  });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.ok(new Set(r.choices.map((c) => c.message.content)).size > 1, "choices differ");
});

test("seed reproduces a sampled reply", async () => {
  const req = { model: MODEL, messages: [{ role: "user", content: "Tell me a story." }], temperature: 1, seed: 42,
                max_tokens: 16, ...NO_THINK };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
});

test("stop string cuts the reply before it", async () => {
  const req = { model: MODEL, messages: [{ role: "user", content: "Hello!" }], temperature: 0, max_tokens: 24, ...NO_THINK };
  const full = (await client.chat.completions.create(req)).choices[0].message.content;
  const at = Math.floor(full.length / 2);
  const stop = full.slice(at, at + 3);
  const r = await client.chat.completions.create({ ...req, stop: [stop] });
  assert.equal(r.choices[0].message.content, full.slice(0, full.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, "stop");
});

test("logprobs with top_logprobs", async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: "user", content: "Hello!" }], temperature: 0, max_tokens: 8,
    logprobs: true, top_logprobs: 3, ...NO_THINK,
  });
  const lp = r.choices[0].logprobs.content;
  assert.ok(lp.length > 0);
  for (const t of lp) {
    assert.equal(typeof t.token, "string");
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    // Greedy: the chosen token is the most likely one.
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
  }
  assert.equal(lp.map((t) => t.token).join(""), r.choices[0].message.content);
});

test("completions API", async () => {
  const r = await client.completions.create({ model: MODEL, prompt: "In the beginning", max_tokens: 6, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.usage.completion_tokens, 6);
  const s = await client.completions.create({ model: MODEL, prompt: "In the beginning", max_tokens: 6, temperature: 0, stream: true });
  let text = "";
  for await (const chunk of s) text += chunk.choices[0]?.text ?? "";
  assert.equal(text, r.choices[0].text);
});

test("models list and retrieve", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [MODEL]);
  const m = await client.models.retrieve(MODEL);
  assert.equal(m.id, MODEL);
  assert.equal(m.object, "model");
});

async function rejectsWith(promise, cls, status, check) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof OpenAI.APIError, `an APIError, got ${err}`);
    assert.ok(err instanceof cls, `a ${cls.name}, got ${err.constructor.name}: ${err.message}`);
    assert.equal(err.status, status);
    if (check) check(err);
    return true;
  });
}

test("errors surface as the SDK's APIError subclasses", async () => {
  const msgs = [{ role: "user", content: "hi" }];
  await rejectsWith(client.chat.completions.create({ model: MODEL, messages: msgs, temperature: "hot" }),
                    OpenAI.BadRequestError, 400, (e) => {
                      assert.equal(e.param, "temperature");
                      assert.equal(e.type, "invalid_request_error");
                      assert.ok(e.message.includes("temperature"));
                    });
  await rejectsWith(client.chat.completions.create({ model: MODEL, messages: [] }), OpenAI.BadRequestError, 400);
  await rejectsWith(client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 1_000_000 }),
                    OpenAI.BadRequestError, 400);
  await rejectsWith(client.chat.completions.create({ model: "gpt-4o", messages: msgs }), OpenAI.NotFoundError, 404,
                    (e) => assert.equal(e.code, "model_not_found"));
  await rejectsWith(client.models.retrieve("nope"), OpenAI.NotFoundError, 404);
  const badKey = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await rejectsWith(badKey.chat.completions.create({ model: MODEL, messages: msgs }), OpenAI.AuthenticationError, 401);
  // A streaming request that is refused fails before any event, as an APIError too.
  await rejectsWith(client.chat.completions.create({ model: MODEL, messages: msgs, stream: true, top_p: 7 }),
                    OpenAI.BadRequestError, 400);
});
