// The official openai npm client against mkserve (tests/cli_serve_test.sh): completions and chat,
// whole and streamed, their usage, and an error status. Exits 1 naming the first mismatch.
// Usage: node openai_client.mjs URL KEY COMPLETION_TEXT CHAT_TEXT PROMPT_TOKENS CHAT_PROMPT_TOKENS COMPLETION_TOKENS
import OpenAI from 'openai';

const [url, key, wantText, wantChat, promptTokens, chatPromptTokens, completionTokens] = process.argv.slice(2);
const client = new OpenAI({ baseURL: url + '/v1', apiKey: key, maxRetries: 0 });
function same(what, got, want) {
  if (String(got) !== String(want)) {
    console.error(`openai_client: ${what}: got ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
    process.exit(1);
  }
}

const models = await client.models.list();
same('models', models.data.length, 1);

const c = await client.completions.create({ model: 'm', prompt: 'Hi', max_tokens: 8 });
same('completion text', c.choices[0].text, wantText);
same('completion finish_reason', c.choices[0].finish_reason, 'stop');
same('completion usage.prompt_tokens', c.usage.prompt_tokens, promptTokens);
same('completion usage.completion_tokens', c.usage.completion_tokens, completionTokens);

let streamed = '';
for await (const chunk of await client.completions.create({ model: 'm', prompt: 'Hi', max_tokens: 8, stream: true }))
  streamed += chunk.choices[0]?.text ?? '';
same('streamed completion', streamed, wantText);

const chat = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8 });
same('chat content', chat.choices[0].message.content, wantChat);
same('chat usage.prompt_tokens', chat.usage.prompt_tokens, chatPromptTokens);

let chatStreamed = '', usage = null, finish = null;
const stream = await client.chat.completions.create({
  model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, stream: true, stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  const choice = chunk.choices[0];
  if (!choice) continue;
  chatStreamed += choice.delta?.content ?? '';
  if (choice.finish_reason) finish = choice.finish_reason;
}
same('streamed chat', chatStreamed, wantChat);
same('streamed chat finish_reason', finish, 'stop');
same('streamed chat usage.completion_tokens', usage?.completion_tokens, completionTokens);

try {
  await client.completions.create({ model: 'm', prompt: 'Hi', max_tokens: 0 });
  same('max_tokens 0', 'accepted', 'refused');
} catch (e) {
  same('max_tokens 0: status', e.status, 400);
  same('max_tokens 0: an error message', typeof e.error?.message, 'string');
}
console.log('openai_client: all checks passed');
