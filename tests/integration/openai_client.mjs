// The official `openai` npm client, unchanged, against `slipway llm serve`: models, completions,
// chat (whole and streamed), logprobs, n, seeds, errors, and a stream the client aborts.
// Prints one JSON object of what it saw; the C++ test checks it.
// Usage: node openai_client.mjs NODE_MODULES_DIR BASE_URL API_KEY MODEL
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, baseURL, apiKey, model] = process.argv.slice(2);
const {default: OpenAI} = await import(pathToFileURL(path.join(modules, "openai", "index.mjs")).href);
const client = new OpenAI({baseURL, apiKey, maxRetries: 0, timeout: 60000});
const seen = {};

const models = await client.models.list();
seen.models = models.data.map((m) => m.id);

const completion = await client.completions.create({model, prompt: "the quick brown fox", max_tokens: 8, temperature: 0, logprobs: 2});
seen.completion = {
  text: completion.choices[0].text, finish: completion.choices[0].finish_reason, usage: completion.usage,
  logprob_tokens: completion.choices[0].logprobs.tokens.length, top: Object.keys(completion.choices[0].logprobs.top_logprobs[0]).length,
};

const messages = [{role: "system", content: "You are terse."}, {role: "user", content: "Say something about the sea."}];
const chat = await client.chat.completions.create({model, messages, max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 3});
seen.chat = {
  content: chat.choices[0].message.content, role: chat.choices[0].message.role, finish: chat.choices[0].finish_reason,
  usage: chat.usage, logprobs: chat.choices[0].logprobs.content.length, top: chat.choices[0].logprobs.content[0].top_logprobs.length,
};

const stream = await client.chat.completions.create({model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: {include_usage: true}});
let streamed = "", role = null, finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  ++chunks;
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    if (choice.delta.role) role = choice.delta.role;
    if (choice.delta.content) streamed += choice.delta.content;
    if (choice.finish_reason) finish = choice.finish_reason;
  }
}
seen.stream = {content: streamed, role, finish, usage, chunks};

const sampled = await client.completions.create({model, prompt: "once upon a time", max_tokens: 12, temperature: 1, seed: 7, n: 2});
const again = await client.completions.create({model, prompt: "once upon a time", max_tokens: 12, temperature: 1, seed: 7, n: 2});
seen.seeded = {choices: sampled.choices.length, same: sampled.choices.map((c) => c.text).join("|") === again.choices.map((c) => c.text).join("|"),
  differ: sampled.choices[0].text !== sampled.choices[1].text};

const stopped = await client.completions.create({model, prompt: "the quick brown fox", max_tokens: 8, temperature: 0, stop: [completion.choices[0].text.slice(2, 4)]});
seen.stop = {text: stopped.choices[0].text, finish: stopped.choices[0].finish_reason};

async function status(call) {
  try {
    await call();
    return 200;
  } catch (error) {
    return error.status ?? String(error);
  }
}
seen.errors = {
  missing_model: await status(() => client.completions.create({model: "nope", prompt: "x"})),
  bad_temperature: await status(() => client.completions.create({model, prompt: "x", temperature: 5})),
  bad_key: await status(() => new OpenAI({baseURL, apiKey: "wrong", maxRetries: 0}).models.list()),
  too_long: await status(() => client.completions.create({model, prompt: "word ".repeat(5000)})),
};

// A stream the client abandons: the server cancels it (its metrics count a cancelled request).
const controller = new AbortController();
const long = await client.completions.create({model, prompt: "tell me a long story", max_tokens: 2000, stream: true, ignore_eos: true},
                                            {signal: controller.signal});
let received = 0;
try {
  for await (const _ of long) {
    if (++received === 3) controller.abort();
  }
} catch (error) {
  seen.aborted = error.name;
}
console.log(JSON.stringify(seen));
