// llama.cpp's greedy tokens for a prompt, through node-llama-cpp's prebuilt CPU library: the peer
// the engine's forward pass is checked against. Prints a JSON array of token ids.
// Usage: node llama_cpp_greedy.mjs NODE_MODULES_DIR MODEL.gguf TOKEN,TOKEN,... COUNT
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, prompt, count] = process.argv.slice(2);
const {getLlama} = await import(pathToFileURL(path.join(modules, "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const context = await model.createContext({contextSize: 128});
const tokens = [];
for await (const token of context.getSequence().evaluate(prompt.split(",").map(Number), {temperature: 0})) {
  tokens.push(token);
  if (tokens.length >= Number(count)) break;
}
console.log(JSON.stringify(tokens));
await context.dispose();
await model.dispose();
