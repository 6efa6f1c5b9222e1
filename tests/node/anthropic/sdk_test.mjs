// End-to-end checks of ember's Anthropic Messages API with the official
// @anthropic-ai/sdk client. The server (see tests/server/test_anthropic_sdk.sh)
// runs a scripted checkpoint whose greedy reply after the generation prompt is
//   <think>Let me ping.</think><tool_call>{"arguments":{},"name":"ping"}</tool_call>
// so every field of the reply is known in advance. The SDK's own stream
// accumulator (MessageStream.finalMessage) validates the event grammar.
//   usage: node sdk_test.mjs BASE_URL API_KEY   (NODE_PATH: the installed node_modules)
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';

const [base, key] = process.argv.slice(2);
const client = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
const TOOL_TEXT = '<tool_call>{"arguments":{},"name":"ping"}</tool_call>';
const HELLO = [{ role: 'user', content: 'hello' }];
const TOOLS = [{ name: 'ping', description: 'Checks the connection', input_schema: { type: 'object', properties: {} } }];
const greedy = { model: 'model', max_tokens: 64, temperature: 0 };
// The prompt's size as the Messages API counts it: computed tokens plus
// those read from the (prefix) cache.
const promptTokens = (u) => u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;

let failures = 0;
async function test(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    failures++;
    console.log(`not ok - ${name}\n  ${(e && e.stack) || e}`);
  }
}

// Runs a stream, recording the raw events, and returns [finalMessage, events].
async function streamed(params) {
  const events = [];
  const stream = client.messages.stream(params);
  stream.on('streamEvent', (ev) => events.push(structuredClone(ev))); // the SDK mutates message_start's message
  const msg = await stream.finalMessage();
  return [msg, events];
}

// The event grammar, beyond what the SDK's accumulator enforces.
function checkGrammar(events, message) {
  assert.equal(events[0].type, 'message_start');
  assert.deepEqual(events[0].message.content, []);
  assert.equal(events[0].message.stop_reason, null);
  assert.equal(events.at(-1).type, 'message_stop');
  assert.equal(events.at(-2).type, 'message_delta');
  assert.equal(events.at(-2).delta.stop_reason, message.stop_reason);
  assert.equal(events.at(-2).usage.output_tokens, message.usage.output_tokens);
  let open = -1, next = 0, sawSignature = false;
  for (const ev of events.slice(1, -2)) {
    if (ev.type === 'content_block_start') {
      assert.equal(open, -1, 'a block starts while another is open');
      assert.equal(ev.index, next);
      open = next++;
      sawSignature = false;
    } else if (ev.type === 'content_block_delta') {
      assert.equal(ev.index, open);
      if (ev.delta.type === 'signature_delta') sawSignature = true;
    } else if (ev.type === 'content_block_stop') {
      assert.equal(ev.index, open);
      if (message.content[open].type === 'thinking') assert.ok(sawSignature, 'thinking block stopped without signature_delta');
      open = -1;
    } else {
      assert.fail(`unexpected event ${ev.type} between message_start and message_delta`);
    }
  }
  assert.equal(open, -1);
  assert.equal(next, message.content.length);
}

async function rejectsWith(promise, cls, status, type) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e && e.constructor && e.constructor.name}: ${e}`);
    assert.equal(e.status, status);
    assert.equal(e.error.type, 'error');
    assert.equal(e.error.error.type, type);
    assert.equal(typeof e.error.error.message, 'string');
    return true;
  });
}

let plain;
await test('messages.create: thinking and text blocks, usage', async () => {
  plain = await client.messages.create({ ...greedy, messages: HELLO });
  assert.match(plain.id, /^msg_/);
  assert.equal(plain.type, 'message');
  assert.equal(plain.role, 'assistant');
  assert.equal(plain.model, 'model');
  assert.deepEqual(plain.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(plain.content[0].thinking, 'Let me ping.');
  assert.ok(typeof plain.content[0].signature === 'string' && plain.content[0].signature.length > 0);
  assert.equal(plain.content[1].text, TOOL_TEXT);
  assert.equal(plain.stop_reason, 'end_turn');
  assert.equal(plain.stop_sequence, null);
  assert.ok(plain.usage.input_tokens > 0 && plain.usage.output_tokens > 0);
  assert.equal(plain.usage.cache_read_input_tokens, 0);
  assert.equal(plain.usage.cache_creation_input_tokens, 0);
});

await test('countTokens equals the input_tokens of the same request', async () => {
  const c = await client.messages.countTokens({ model: 'model', messages: HELLO });
  assert.equal(c.input_tokens, promptTokens(plain.usage));
  const withTools = await client.messages.countTokens({ model: 'model', messages: HELLO, tools: TOOLS, system: 'Be brief.' });
  const r = await client.messages.create({ ...greedy, messages: HELLO, tools: TOOLS, system: 'Be brief.' });
  assert.equal(withTools.input_tokens, promptTokens(r.usage));
  assert.ok(withTools.input_tokens > c.input_tokens);
});

await test('messages.stream: finalMessage equals the non-streamed reply; grammar', async () => {
  const [msg, events] = await streamed({ ...greedy, messages: HELLO });
  assert.deepEqual(msg.content, plain.content);
  assert.equal(msg.stop_reason, 'end_turn');
  /* the same prompt again: part of it may now be read from the prefix cache */
  assert.equal(promptTokens(msg.usage), promptTokens(plain.usage));
  assert.equal(msg.usage.output_tokens, plain.usage.output_tokens);
  assert.equal(msg.usage.cache_creation_input_tokens, 0);
  checkGrammar(events, msg);
  assert.ok(events.some((e) => e.delta && e.delta.type === 'thinking_delta'));
  assert.ok(events.some((e) => e.delta && e.delta.type === 'text_delta'));
});

let call;
await test('tool use: tool_use block with a toolu_ id and parsed input', async () => {
  call = await client.messages.create({ ...greedy, messages: HELLO, tools: TOOLS });
  assert.deepEqual(call.content.map((b) => b.type), ['thinking', 'tool_use']);
  const tu = call.content[1];
  assert.match(tu.id, /^toolu_[A-Za-z0-9]+$/);
  assert.equal(tu.name, 'ping');
  assert.deepEqual(tu.input, {});
  assert.equal(call.stop_reason, 'tool_use');
});

await test('tool use streamed: input_json_delta accumulated by the SDK', async () => {
  const [msg, events] = await streamed({ ...greedy, messages: HELLO, tools: TOOLS, tool_choice: { type: 'auto' } });
  assert.deepEqual(msg.content.map((b) => b.type), ['thinking', 'tool_use']);
  assert.equal(msg.content[1].name, 'ping');
  assert.deepEqual(msg.content[1].input, {});
  assert.equal(msg.stop_reason, 'tool_use');
  assert.ok(events.some((e) => e.delta && e.delta.type === 'input_json_delta'));
  checkGrammar(events, msg);
});

await test('tool round trip: the reply replayed with a tool_result', async () => {
  const tu = call.content[1];
  const convo = [
    ...HELLO,
    { role: 'assistant', content: call.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: 'pong' }] },
  ];
  const r = await client.messages.create({ ...greedy, messages: convo, tools: TOOLS });
  assert.equal(r.stop_reason, 'tool_use');
  assert.ok(promptTokens(r.usage) > promptTokens(call.usage));
  const c = await client.messages.countTokens({ model: 'model', messages: convo, tools: TOOLS });
  assert.equal(c.input_tokens, promptTokens(r.usage));
  // An error result with block content, followed by the user's words.
  const err = [
    ...convo.slice(0, 2),
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: tu.id, is_error: true, content: [{ type: 'text', text: 'timed out' }] },
        { type: 'text', text: 'try again' },
      ],
    },
  ];
  const r2 = await client.messages.create({ ...greedy, messages: err, tools: TOOLS });
  assert.equal(r2.stop_reason, 'tool_use');
  assert.ok(promptTokens(r2.usage) > promptTokens(r.usage));
});

await test('stop_sequences: stop_reason stop_sequence and the sequence', async () => {
  const params = { ...greedy, messages: HELLO, stop_sequences: ['zzz', 'name'] };
  const r = await client.messages.create(params);
  assert.equal(r.stop_reason, 'stop_sequence');
  assert.equal(r.stop_sequence, 'name');
  assert.equal(r.content.at(-1).text, '<tool_call>{"arguments":{},"');
  const [s, events] = await streamed(params);
  assert.equal(s.stop_reason, 'stop_sequence');
  assert.equal(s.stop_sequence, 'name');
  assert.deepEqual(s.content, r.content);
  checkGrammar(events, s);
});

await test('max_tokens: stop_reason max_tokens', async () => {
  const r = await client.messages.create({ ...greedy, max_tokens: 3, messages: HELLO });
  assert.equal(r.stop_reason, 'max_tokens');
  assert.equal(r.usage.output_tokens, 3);
});

await test('thinking enabled / disabled reach the template', async () => {
  const on = await client.messages.create({
    ...greedy, max_tokens: 1500, messages: HELLO, thinking: { type: 'enabled', budget_tokens: 1024 },
  });
  assert.deepEqual(on.content.map((b) => b.type), ['thinking', 'text']);
  const off = await client.messages.create({ ...greedy, max_tokens: 4, messages: HELLO, thinking: { type: 'disabled' } });
  assert.ok(off.content.every((b) => b.type === 'text'));
  const c = await client.messages.countTokens({ model: 'model', messages: HELLO, thinking: { type: 'disabled' } });
  assert.equal(c.input_tokens, promptTokens(off.usage));
  assert.notEqual(c.input_tokens, promptTokens(plain.usage)); // the empty think block is in the prompt
});

await test('system prompt, metadata, top_k / top_p are accepted', async () => {
  const r = await client.messages.create({
    ...greedy, messages: HELLO, system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }],
    metadata: { user_id: 'u-1' }, top_k: 5, top_p: 0.9,
  });
  assert.equal(r.stop_reason, 'end_turn');
});

await test('errors surface as the SDK typed errors', async () => {
  const bad = new Anthropic({ baseURL: base, apiKey: 'wrong', maxRetries: 0 });
  await rejectsWith(bad.messages.create({ ...greedy, messages: HELLO }), Anthropic.AuthenticationError, 401, 'authentication_error');
  await rejectsWith(client.messages.create({ ...greedy, model: 'claude-x', messages: HELLO }), Anthropic.NotFoundError, 404, 'not_found_error');
  const image = [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }];
  await rejectsWith(client.messages.create({ ...greedy, messages: image }), Anthropic.BadRequestError, 400, 'invalid_request_error');
  await rejectsWith(client.messages.create({ ...greedy, messages: HELLO, tools: TOOLS, tool_choice: { type: 'tool', name: 'nope' } }),
    Anthropic.BadRequestError, 400, 'invalid_request_error');
  await rejectsWith(client.messages.stream({ ...greedy, messages: image }).finalMessage(), Anthropic.BadRequestError, 400,
    'invalid_request_error');
  await rejectsWith(client.messages.countTokens({ model: 'model', messages: [] }), Anthropic.BadRequestError, 400,
    'invalid_request_error');
  await rejectsWith(client.messages.create({ ...greedy, max_tokens: 5000, messages: HELLO }), Anthropic.BadRequestError, 400,
    'invalid_request_error');
});

if (failures) {
  console.log(`${failures} test(s) failed`);
  process.exit(1);
}
console.log('all Anthropic SDK checks passed');
