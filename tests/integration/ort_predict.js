// Runs an ONNX file in ONNX Runtime (onnxruntime-node, CPU) on float32 inputs and prints its
// float32 outputs as JSON. Usage: node ort_predict.js MODEL.onnx INPUTS.json
//   INPUTS.json: {"name": {"dims": [rows, columns], "data": [...]}, ...}; NaN travels as null.
const fs = require("fs");
const ort = require("onnxruntime-node");

async function main() {
  const [modelPath, inputsPath] = process.argv.slice(2);
  const session = await ort.InferenceSession.create(modelPath, { intraOpNumThreads: 1 });
  const inputs = JSON.parse(fs.readFileSync(inputsPath, "utf8"));
  const feeds = {};
  for (const [name, value] of Object.entries(inputs)) {
    const data = Float32Array.from(value.data, (x) => (x === null ? NaN : x));
    feeds[name] = new ort.Tensor("float32", data, value.dims);
  }
  const results = await session.run(feeds);
  const out = {};
  for (const [name, tensor] of Object.entries(results)) {
    out[name] = { dims: tensor.dims, data: Array.from(tensor.data, (x) => (Number.isNaN(x) ? null : x)) };
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((error) => {
  process.stderr.write(String(error) + "\n");
  process.exit(1);
});
