// llama.cpp serving several sequences from one context, the way llama-server does, behind the
// OpenAI completions API that `slipway llm bench-serve` drives: the peer of bench/llm_serve_bench.sh.
//
// One LlamaContext holds SEQUENCES sequences of CONTEXT tokens each (node-llama-cpp 3.21.1's
// `contextSize` is per sequence: it allocates contextSize × sequences cells). A request takes a
// free sequence (or waits in line for one), evaluates its prompt and generates on it, streams
// each token as a server-sent event, and clears the sequence when it ends. node-llama-cpp batches
// the evaluations of all the context's sequences that are pending in the same event-loop cycle
// into one llama_decode, so concurrent requests decode together: continuous batching with
// llama.cpp's kernels. No prefix caching: every prompt is evaluated whole.
//
// API: POST /v1/completions with `prompt` (token ids, or text to tokenize), `max_tokens`
// (default 16), `temperature` (0: greedy; default 1), `seed`, `ignore_eos`, `stream` and
// `stream_options.include_usage`; GET /v1/models; GET /health. Prints `listening PORT` on stdout
// when ready (PORT 0 picks a free port).
//
// Usage: [PEER_MMAP=1] node llm_serve_peer.mjs NODE_MODULES_DIR MODEL.gguf PORT SEQUENCES CONTEXT THREADS [BATCH]
// (weights are read into memory unless PEER_MMAP=1 maps them; BATCH: tokens per llama_decode, default 512)
import http from "node:http";
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, portText, sequencesText, contextText, threadsText, batchText] = process.argv.slice(2);
if (!threadsText) {
  console.error("usage: node llm_serve_peer.mjs NODE_MODULES_DIR MODEL.gguf PORT SEQUENCES CONTEXT THREADS [BATCH]");
  process.exit(2);
}
const sequences = Number(sequencesText), perSequence = Number(contextText), threads = Number(threadsText);
const batchSize = Number(batchText ?? 512);
const modelId = path.basename(modelPath).replace(/\.gguf$/, "");

const {getLlama} = await import(pathToFileURL(path.join(modules, "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, useMmap: process.env.PEER_MMAP === "1"});
const context = await model.createContext({sequences, contextSize: perSequence, batchSize, threads});
const vocabulary = model.tokens.vocabularySize ?? 0;

// The free sequences, and the requests waiting for one (first come, first served).
const free = Array.from({length: sequences}, () => context.getSequence());
const waiting = [];
const acquire = () => free.length > 0 ? Promise.resolve(free.pop()) : new Promise((resolve) => waiting.push(resolve));
async function release(sequence) {
  await sequence.clearHistory();
  if (waiting.length > 0) waiting.shift()(sequence);
  else free.push(sequence);
}

let served = 0;
const sendJson = (response, status, value) => {
  response.writeHead(status, {"Content-Type": "application/json"});
  response.end(JSON.stringify(value));
};
const sendError = (response, status, message) =>
  sendJson(response, status, {error: {message, type: "invalid_request_error", param: null, code: null}});

// The request's fields checked and defaulted, or a message saying what is wrong.
function parseRequest(body) {
  let request;
  try {
    request = JSON.parse(body);
  } catch {
    return {error: "the body is not valid JSON"};
  }
  if (typeof request !== "object" || request === null || Array.isArray(request)) return {error: "the body must be a JSON object"};
  if (request.model !== modelId) return {error: `the model '${request.model}' does not exist on this server`, status: 404};
  let prompt = request.prompt;
  if (typeof prompt === "string") prompt = model.tokenize(prompt);
  if (!Array.isArray(prompt) || prompt.length === 0 ||
      !prompt.every((token) => Number.isInteger(token) && token >= 0 && (vocabulary === 0 || token < vocabulary))) {
    return {error: "'prompt' must be text or a non-empty array of token ids within the vocabulary"};
  }
  const maxTokens = request.max_tokens ?? 16;
  if (!Number.isInteger(maxTokens) || maxTokens < 1) return {error: "'max_tokens' must be a positive integer"};
  if (prompt.length >= perSequence) {
    return {error: `the prompt has ${prompt.length} tokens; the context holds ${perSequence} with the reply`};
  }
  const temperature = request.temperature ?? 1;
  if (typeof temperature !== "number" || temperature < 0) return {error: "'temperature' must be a number, at least 0"};
  return {
    prompt,
    maxTokens: Math.min(maxTokens, perSequence - prompt.length),
    temperature,
    seed: Number.isInteger(request.seed) ? request.seed : undefined,
    ignoreEos: request.ignore_eos === true,
    stream: request.stream === true,
    includeUsage: request.stream_options?.include_usage === true,
  };
}

async function complete(request, response) {
  const id = `cmpl-peer-${++served}`, created = Math.floor(Date.now() / 1000);
  const chunk = (choices, usage) => {
    const value = {id, object: "text_completion", created, model: modelId, choices};
    if (request.includeUsage) value.usage = usage ?? null;
    return `data: ${JSON.stringify(value)}\n\n`;
  };
  let gone = false;
  response.on("close", () => { gone = !response.writableFinished; });
  if (request.stream) {
    response.writeHead(200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"});
  }
  const sequence = await acquire();
  const generated = [];
  let text = "", finish = "length", failure = null;
  try {
    const options = {temperature: request.temperature};
    if (request.seed !== undefined) options.seed = request.seed;
    for await (const token of sequence.evaluate(request.prompt, options)) {
      if (gone) break;
      if (!request.ignoreEos && model.isEogToken(token)) {
        finish = "stop";
        break;
      }
      const piece = model.detokenize([token], false, generated.slice(-8));
      generated.push(token);
      if (request.stream) {
        response.write(chunk([{index: 0, text: piece, logprobs: null, finish_reason: null}]));
      } else {
        text += piece;
      }
      if (generated.length >= request.maxTokens) break;
    }
  } catch (error) {
    failure = String(error?.message ?? error);
  } finally {
    await release(sequence);
  }
  if (gone) return;
  const usage = {prompt_tokens: request.prompt.length, completion_tokens: generated.length,
                 total_tokens: request.prompt.length + generated.length};
  if (!request.stream) {
    if (failure) return sendJson(response, 500, {error: {message: failure, type: "server_error", param: null, code: null}});
    return sendJson(response, 200, {id, object: "text_completion", created, model: modelId,
                                    choices: [{index: 0, text, logprobs: null, finish_reason: finish}], usage});
  }
  if (failure) {
    response.write(`data: ${JSON.stringify({error: {message: failure, type: "server_error", param: null, code: null}})}\n\n`);
  } else {
    response.write(chunk([{index: 0, text: "", logprobs: null, finish_reason: finish}]));
    if (request.includeUsage) response.write(chunk([], usage));
  }
  response.end("data: [DONE]\n\n");
}

const server = http.createServer((request, response) => {
  const url = request.url.split("?")[0];
  if (request.method === "GET" && url === "/health") return sendJson(response, 200, {status: "ok"});
  if (request.method === "GET" && url === "/v1/models") {
    return sendJson(response, 200, {object: "list", data: [{id: modelId, object: "model", created: 0, owned_by: "peer"}]});
  }
  if (url !== "/v1/completions") return sendError(response, 404, `no route for ${url}`);
  if (request.method !== "POST") return sendError(response, 405, "use POST");
  const parts = [];
  request.on("data", (part) => parts.push(part));
  request.on("end", () => {
    const parsed = parseRequest(Buffer.concat(parts).toString("utf8"));
    if (parsed.error) return sendError(response, parsed.status ?? 400, parsed.error);
    complete(parsed, response).catch((error) => {
      if (!response.headersSent) sendError(response, 500, String(error?.message ?? error));
      else response.destroy();
    });
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(portText), "127.0.0.1", () => console.log(`listening ${server.address().port}`));
const stop = () => {
  server.close();
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
