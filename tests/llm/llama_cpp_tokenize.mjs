// llama.cpp's tokens for texts, through node-llama-cpp's prebuilt CPU library: the peer the
// tokenizer is checked against. CASES_FILE holds one case a line, "S HEX": S is 1 to match
// special tokens' text (llama_tokenize's parse_special) and 0 not, HEX the text's UTF-8 bytes
// (so any text survives the trip). For each case prints one line: model.tokenize(text, S) (which
// adds no BOS: common_tokenize with add_special false), comma-separated, then "|", then the hex
// of model.detokenize(those tokens) (llama_detokenize, special tokens not rendered).
// Usage: node llama_cpp_tokenize.mjs NODE_MODULES_DIR MODEL.gguf CASES_FILE
import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modules, modelPath, casesPath] = process.argv.slice(2);
const {getLlama} = await import(pathToFileURL(path.join(modules, "node-llama-cpp", "dist", "index.js")).href);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
const lines = [];
for (const line of fs.readFileSync(casesPath, "utf8").split("\n")) {
  if (line === "") continue;
  const [special, hex] = line.split(" ");
  const text = Buffer.from(hex ?? "", "hex").toString("utf8");
  const tokens = model.tokenize(text, special === "1");
  const detokenized = Buffer.from(model.detokenize(tokens, false), "utf8").toString("hex");
  lines.push(`${tokens.join(",")}|${detokenized}`);
}
console.log(lines.join("\n"));
await model.dispose();
