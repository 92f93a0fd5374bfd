#!/usr/bin/env bash
# The dense kernels against ONNX Runtime on the same MLP shape (28 -> 256 -> 256 -> 1, ReLU),
# in one run: ours in fp32, bf16 and int8 (bench/dense_bench.cpp, BM_MlpF32, BM_MlpBf16 and
# BM_MlpInt8) and ONNX
# Runtime 1.30's CPU provider through onnxruntime-node and PyTorch (python3-torch, when installed),
# at batch 1 (seconds per call) and batch 256
# (rows per second), on 1 and 2 threads; ratios are ours over theirs in rows per second.
# Needs python3-onnx (the model file) and Node.js; onnxruntime-node is installed into
# ~/.cache/slipway-peers with --ignore-scripts (its install script fetches GPU extras from a host
# this machine cannot reach).
# Usage: bench/dense_peer.sh [BUILD_DIR]   (build/release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
peers="$HOME/.cache/slipway-peers"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v node > /dev/null || { echo "dense_peer.sh needs Node.js (and npm) for ONNX Runtime" >&2; exit 2; }
if [ ! -d "$peers/node_modules/onnxruntime-node" ]; then
  mkdir -p "$peers"
  (cd "$peers" && npm install --ignore-scripts --no-audit --no-fund onnxruntime-node@1.30.0 > /dev/null)
fi
/usr/bin/python3 "$root/bench/dense_peer.py" "$work/mlp.onnx"
NODE_PATH="$peers/node_modules" node "$root/bench/dense_peer.js" "$work/mlp.onnx" > "$work/ort.json"
if /usr/bin/python3 -c "import torch" 2> /dev/null; then
  /usr/bin/python3 "$root/bench/dense_peer_torch.py" "$work/mlp.onnx" > "$work/torch.json"
else
  echo '{}' > "$work/torch.json"
fi
"$build/bench/slipway_bench" --benchmark_filter='BM_Mlp' --benchmark_repetitions=7 \
  --benchmark_report_aggregates_only=true --benchmark_format=json --benchmark_out="$work/ours.json" \
  --benchmark_out_format=json > /dev/null
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
ort = json.load(open(f"{work}/ort.json"))
torch = json.load(open(f"{work}/torch.json"))
ours = {}
for b in json.load(open(f"{work}/ours.json"))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        name, batch, threads = b["run_name"].split("/")[:3]
        ours[(name, int(batch), int(threads))] = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}[b["time_unit"]]
print("MLP 28 -> 256 -> 256 -> 1, median of 7 rounds")
print(f"{'':28}{'ours fp32':>11}{'ours bf16':>11}{'ours int8':>11}{'ONNX Runtime':>14}{'PyTorch':>9}{'fp32/ORT':>10}{'bf16/ORT':>10}{'int8/ORT':>10}{'int8/fp32':>11}{'fp32/torch':>12}")
for threads in (1, 2):
    for batch in (1, 256):
        peer = ort[f"batch{batch}_threads{threads}"]
        f32 = ours[("BM_MlpF32", batch, threads)]
        int8 = ours[("BM_MlpInt8", batch, threads)]
        bf16 = ours[("BM_MlpBf16", batch, threads)]
        unit = "us/call" if batch == 1 else "k rows/s"
        show = (lambda s: f"{s * 1e6:.1f}") if batch == 1 else (lambda s: f"{batch / s / 1e3:.0f}")
        key = f"batch{batch}_threads{threads}"
        pytorch = torch.get(key)
        print(f"batch {batch:>3}, {threads} thread{'s' if threads > 1 else ' '} ({unit:8})"
              f"{show(f32):>11}{show(bf16):>11}{show(int8):>11}{show(peer):>14}"
              f"{show(pytorch) if pytorch else '-':>9}{peer / f32:>10.2f}{peer / bf16:>10.2f}"
              f"{peer / int8:>10.2f}{f32 / int8:>11.2f}{pytorch / f32 if pytorch else float('nan'):>12.2f}")
if torch:
    print(f"PyTorch {torch['torch']} (Debian's python3-torch), called from Python under inference_mode")
PY
