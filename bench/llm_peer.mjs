// llama.cpp's pp and tg figures on a GGUF file through node-llama-cpp's prebuilt CPU library, in
// llama-bench's method: pp = a prompt of N random tokens decoded as one batch, tg = M tokens
// decoded one at a time from an empty context; a warm-up, then REPS timed runs; tokens/s as
// mean and sample standard deviation. Prints one JSON line per test.
// Usage: [PEER_MMAP=0] node llm_peer.mjs NODE_MODULES_DIR MODEL.gguf THREADS PROMPT GENERATE REPS
// (PEER_MMAP=0: weights read into memory, not mapped from the file)
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, threadsText, promptText, generateText, repsText] = process.argv.slice(2);
const threads = Number(threadsText), prompt = Number(promptText), generate = Number(generateText);
const reps = Number(repsText);
const {getLlama} = await import(pathToFileURL(path.join(modules, "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, useMmap: process.env.PEER_MMAP !== "0"});
const vocabulary = model.tokens.vocabularySize ?? 32000;
let seed = 17;
const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) % vocabulary;
const tokens = (count) => Array.from({length: count}, random);

async function once(test) {
  const context = await model.createContext({
    contextSize: Math.max(prompt, generate) + 16, batchSize: Math.max(prompt, 1), threads, sequences: 1});
  const sequence = context.getSequence();
  const start = process.hrtime.bigint();
  if (test === "pp") {
    await sequence.evaluateWithoutGeneratingNewTokens(tokens(prompt));
  } else {
    // Each step decodes the token the last one sampled: one token per llama_decode call.
    let count = 0;
    for await (const _ of sequence.evaluate(tokens(1), {temperature: 0})) {
      if (++count >= generate) break;
    }
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  await context.dispose();
  return (test === "pp" ? prompt : generate) / seconds;
}

for (const test of ["pp", "tg"]) {
  if ((test === "pp" ? prompt : generate) === 0) continue;
  await once(test);
  const rates = [];
  for (let i = 0; i < reps; ++i) rates.push(await once(test));
  const mean = rates.reduce((a, b) => a + b, 0) / rates.length;
  const sd = rates.length > 1 ? Math.sqrt(rates.reduce((a, b) => a + (b - mean) ** 2, 0) / (rates.length - 1)) : 0;
  console.log(JSON.stringify({test: test + (test === "pp" ? prompt : generate), threads, tokens_per_second: mean, deviation: sd}));
}
await model.dispose();
