// ONNX Runtime (onnxruntime-node) on the MLP dense_peer.py writes: median seconds per call at
// batch 1 and 256, on 1 and 2 intra-op threads, as JSON on stdout.
// Usage: node dense_peer.js MODEL.onnx   (NODE_PATH must reach onnxruntime-node)
const ort = require("onnxruntime-node");

async function measure(path, batch, threads) {
  const session = await ort.InferenceSession.create(path, {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: "sequential",
  });
  const data = new Float32Array(batch * 28).map((_, i) => Math.sin(i));
  const feeds = { x: new ort.Tensor("float32", data, [batch, 28]) };
  for (let i = 0; i < 200; ++i) await session.run(feeds);  // warm-up
  const calls = batch === 1 ? 2000 : 200;
  const rounds = [];
  for (let round = 0; round < 7; ++round) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < calls; ++i) await session.run(feeds);
    rounds.push(Number(process.hrtime.bigint() - start) / 1e9 / calls);
  }
  rounds.sort((a, b) => a - b);
  return rounds[3];
}

(async () => {
  const results = {};
  for (const threads of [1, 2]) {
    for (const batch of [1, 256]) results[`batch${batch}_threads${threads}`] = await measure(process.argv[2], batch, threads);
  }
  console.log(JSON.stringify(results));
})();
