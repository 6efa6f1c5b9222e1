// The official `openai` package against `ember serve` (the demo model): the
// Responses API — create, the stream helper and its final response, event
// grammar and sequence numbers, reasoning items, a three-turn chain over
// previous_response_id, a function-calling round trip with
// function_call_output, retrieve, input items, delete, and errors as the
// SDK's APIError subclasses. Started by tests/server/test_openai_sdk.sh.
import assert from "node:assert/strict";
import { test } from "node:test";
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.EMBER_BASE_URL, apiKey: process.env.EMBER_API_KEY, maxRetries: 0 });
const MODEL = "demo";
const WEATHER = {
  type: "function",
  name: "get_weather",
  description: "Get the current weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};

const text = (r) => r.output.filter((o) => o.type === "message").flatMap((o) => o.content).map((c) => c.text).join("");

test("create: a response object as OpenAI returns it", async () => {
  const r = await client.responses.create({ model: MODEL, input: "Hello!", temperature: 0, max_output_tokens: 40 });
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, "response");
  assert.equal(r.status, "completed");
  assert.equal(r.model, MODEL);
  assert.equal(typeof r.created_at, "number");
  assert.equal(r.output.length, 1);
  const m = r.output[0];
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.equal(m.status, "completed");
  assert.match(m.id, /^msg_/);
  assert.equal(m.content[0].type, "output_text");
  assert.deepEqual(m.content[0].annotations, []);
  assert.ok(r.output_text.length > 0, "the SDK's output_text convenience works");
  assert.equal(r.output_text, m.content[0].text);
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  /* earlier requests to this server may leave the chat template's opening in the prefix cache */
  const cached = r.usage.input_tokens_details.cached_tokens;
  assert.ok(Number.isInteger(cached) && cached >= 0 && cached < r.usage.input_tokens);
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
  assert.equal(r.previous_response_id, null);
  assert.equal(r.max_output_tokens, 40);
  assert.equal(r.temperature, 0);
});

test("instructions, metadata and an incomplete response cut by max_output_tokens", async () => {
  const r = await client.responses.create({
    model: MODEL, input: "Recite Genesis 1.", instructions: "You are helpful.", metadata: { run: "t1" },
    max_output_tokens: 5, temperature: 0,
  });
  assert.equal(r.status, "incomplete");
  assert.deepEqual(r.incomplete_details, { reason: "max_output_tokens" });
  assert.equal(r.output[0].status, "incomplete");
  assert.equal(r.usage.output_tokens, 5);
  assert.equal(r.instructions, "You are helpful.");
  assert.deepEqual(r.metadata, { run: "t1" });
});

test("stream helper: events in grammar order, final response equals the plain one", async () => {
  const req = { model: MODEL, input: "Hello!", temperature: 0, max_output_tokens: 40 };
  const plain = await client.responses.create(req);
  const stream = client.responses.stream(req);
  const types = [];
  const seqs = [];
  let deltas = "";
  stream.on("response.output_text.delta", (e) => { deltas += e.delta; });
  for await (const ev of stream) {
    types.push(ev.type);
    seqs.push(ev.sequence_number);
  }
  const final = await stream.finalResponse();
  assert.deepEqual(seqs, seqs.map((_, i) => i), "sequence numbers count from 0");
  assert.equal(types[0], "response.created");
  assert.equal(types[1], "response.in_progress");
  assert.equal(types.at(-1), "response.completed");
  const order = ["response.output_item.added", "response.content_part.added", "response.output_text.delta",
                 "response.output_text.done", "response.content_part.done", "response.output_item.done"];
  let at = -1;
  for (const t of order) {
    const i = types.indexOf(t, at + 1);
    assert.ok(i > at, `${t} after the previous stage`);
    at = i;
  }
  assert.equal(final.status, "completed");
  assert.equal(final.output_text, plain.output_text);
  assert.equal(deltas, plain.output_text);
  assert.equal(final.usage.output_tokens, plain.usage.output_tokens);
});

test("reasoning: a reasoning item before the message, streamed as reasoning_text", async () => {
  const req = { model: MODEL, input: "Hello!", temperature: 0, max_output_tokens: 96, reasoning: { effort: "low" } };
  const r = await client.responses.create(req);
  assert.deepEqual(r.output.map((o) => o.type), ["reasoning", "message"]);
  assert.match(r.output[0].id, /^rs_/);
  assert.ok(r.output[0].content[0].text.length > 0);
  assert.equal(r.output[0].content[0].type, "reasoning_text");
  assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
  const s = client.responses.stream(req);
  let reasoning = "";
  s.on("response.reasoning_text.delta", (e) => { reasoning += e.delta; });
  const final = await s.finalResponse();
  assert.equal(reasoning, r.output[0].content[0].text);
  assert.equal(final.output[0].content[0].text, r.output[0].content[0].text);
  assert.equal(final.output_text, r.output_text);
});

test("three-turn chain over previous_response_id; retrieve, input items, delete", async () => {
  const t1 = await client.responses.create({ model: MODEL, input: "What is 2 + 3?", temperature: 0, max_output_tokens: 40 });
  const t2 = await client.responses.create({ model: MODEL, previous_response_id: t1.id, input: "Hello!", temperature: 0,
                                             max_output_tokens: 40 });
  assert.equal(t2.previous_response_id, t1.id);
  // The chained turn saw the first one: its prompt is longer than turn 1's whole exchange.
  assert.ok(t2.usage.input_tokens > t1.usage.input_tokens + t1.usage.output_tokens);
  const t3 = await client.responses.create({ model: MODEL, previous_response_id: t2.id,
                                             input: [{ role: "user", content: [{ type: "input_text", text: "Thanks!" }] }],
                                             temperature: 0, max_output_tokens: 40 });
  assert.ok(t3.usage.input_tokens > t2.usage.input_tokens + t2.usage.output_tokens);
  // Same conversation sent explicitly as items: the same prompt, the same answer.
  const explicit = await client.responses.create({
    model: MODEL, temperature: 0, max_output_tokens: 40,
    input: [{ role: "user", content: "What is 2 + 3?" }, { role: "assistant", content: t1.output_text },
            { role: "user", content: "Hello!" }, { role: "assistant", content: t2.output_text },
            { role: "user", content: "Thanks!" }],
  });
  assert.equal(explicit.usage.input_tokens, t3.usage.input_tokens);
  assert.equal(explicit.output_text, t3.output_text);

  const got = await client.responses.retrieve(t3.id);
  assert.equal(got.id, t3.id);
  assert.equal(got.output_text, t3.output_text);
  const items = [];
  for await (const it of client.responses.inputItems.list(t3.id, { order: "asc" })) items.push(it);
  assert.deepEqual(items.map((i) => i.type === "message" ? i.role : i.type), ["user", "assistant", "user", "assistant", "user"]);
  assert.equal(items[4].content[0].text, "Thanks!");

  await client.responses.delete(t3.id);
  await assert.rejects(client.responses.retrieve(t3.id), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.responses.create({ model: MODEL, previous_response_id: t3.id, input: "again" }),
                       (e) => e instanceof OpenAI.NotFoundError && e.param === "previous_response_id");
});

test("function calling round trip with function_call_output", async () => {
  const r = await client.responses.create({ model: MODEL, input: "What's the weather in Paris?", tools: [WEATHER],
                                            temperature: 0, max_output_tokens: 64 });
  const calls = r.output.filter((o) => o.type === "function_call");
  assert.equal(calls.length, 1);
  const call = calls[0];
  assert.match(call.id, /^fc_/);
  assert.match(call.call_id, /^call_/);
  assert.equal(call.name, "get_weather");
  assert.equal(call.status, "completed");
  assert.deepEqual(JSON.parse(call.arguments), { city: "Paris" });
  assert.equal(r.tools[0].name, "get_weather");

  // Streamed: argument deltas add up to the same call.
  const s = client.responses.stream({ model: MODEL, input: "What's the weather in Paris?", tools: [WEATHER], temperature: 0,
                                      max_output_tokens: 64 });
  let args = "", done = null;
  s.on("response.function_call_arguments.delta", (e) => { args += e.delta; });
  s.on("response.function_call_arguments.done", (e) => { done = e; });
  const final = await s.finalResponse();
  assert.equal(args, call.arguments);
  assert.equal(done.name, "get_weather");
  assert.equal(final.output.find((o) => o.type === "function_call").arguments, call.arguments);

  const answer = await client.responses.create({
    model: MODEL, previous_response_id: r.id, tools: [WEATHER], temperature: 0, max_output_tokens: 64,
    input: [{ type: "function_call_output", call_id: call.call_id,
              output: '{"city": "Paris", "temperature": 18, "unit": "celsius", "condition": "sunny"}' }],
  });
  assert.equal(answer.status, "completed");
  assert.match(answer.output_text, /Paris/);
  assert.match(answer.output_text, /18/);

  // The same round trip without the store: the call item sent back explicitly.
  const manual = await client.responses.create({
    model: MODEL, tools: [WEATHER], temperature: 0, max_output_tokens: 64, store: false,
    input: [{ role: "user", content: "What's the weather in Paris?" }, call,
            { type: "function_call_output", call_id: call.call_id,
              output: '{"city": "Paris", "temperature": 18, "unit": "celsius", "condition": "sunny"}' }],
  });
  assert.equal(manual.output_text, answer.output_text);
  await assert.rejects(client.responses.retrieve(manual.id), (e) => e instanceof OpenAI.NotFoundError);
});

test("errors surface as APIError subclasses with OpenAI's shape", async () => {
  const bad = async (body, param) => {
    await assert.rejects(client.responses.create({ model: MODEL, ...body }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, `BadRequestError, got ${e.constructor.name}: ${e.message}`);
      assert.equal(e.status, 400);
      if (param) assert.equal(e.param, param);
      return true;
    });
  };
  await bad({ input: [{ role: "user", content: [{ type: "input_image", image_url: "https://example.com/x.png" }] }] },
            "input[0].content[0]");
  await bad({ input: [{ role: "user", content: [{ type: "hologram" }] }] }, "input[0].content[0]");
  await bad({ input: "hi", text: { format: { type: "json_schema", name: "x" } } }, "text.format.schema");
  await bad({ input: "hi", text: { format: { type: "json_schema", name: "x", schema: { type: "object", not: {} } } } });
  await bad({ input: "hi", tools: [{ type: "web_search" }] }, "tools[0]");
  await bad({ input: "hi", temperature: 5 }, "temperature");
  await bad({}, "input");
  await assert.rejects(client.responses.create({ model: "gpt-5", input: "hi" }), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.responses.retrieve("resp_doesnotexist"), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.responses.delete("resp_doesnotexist"), (e) => e instanceof OpenAI.NotFoundError);
});
