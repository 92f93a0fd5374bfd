#!/usr/bin/env bash
# The CUDA backend on a lent GPU, as one short prepared run (the device tool's 15 minutes): builds
# slipway when BUILD_DIR has none (the release preset, every core), writes the random-weight 110M
# and 1B Llamas in F16 and Q8_0, and runs `slipway llm bench --device cuda` on each: the GPU's
# logits against the CPU's on a 128-token prompt (largest and RMS difference, top-token
# agreement), pp512, tg128, and decoding 128 tokens for 16 and 64 sequences at once, each decode
# figure against the card's memory-bandwidth limit. JSON per model into OUT_DIR (default $OUT,
# else bench-out/), and to stdout.
#
# Usage: bench/llm_cuda_check.sh BUILD_DIR
# Environment: OUT_DIR  MODELS [110m 1b]  TYPES [f16 q8_0]  SEQUENCES [1,16,64]
set -euo pipefail
build=${1:?usage: bench/llm_cuda_check.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT_DIR:-${OUT:-bench-out}}
mkdir -p "$out"
if [[ ! -x $build/slipway ]]; then
  (cd "$root" && cmake --preset release >"$out/configure.log" 2>&1 &&
    cmake --build --preset release --target slipway -j "$(nproc)" >"$out/build.log" 2>&1) || {
    echo "build failed: see $out/configure.log and $out/build.log" >&2
    tail -20 "$out/build.log" "$out/configure.log" 2>/dev/null >&2
    exit 1
  }
fi
slipway="$build/slipway"
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv | tee "$out/nvidia-smi.csv" || true
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
for size in ${MODELS:-110m 1b}; do
  case $size in
    110m) shape=(--layers 12 --dim 768 --heads 12 --kv-heads 12 --ff 2048) ;;
    1b) shape=(--layers 16 --dim 2048 --heads 32 --kv-heads 8 --ff 8192) ;;
    *) echo "unknown size $size (110m or 1b)" >&2; exit 2 ;;
  esac
  for type in ${TYPES:-f16 q8_0}; do
    file="$models/${size}_$type.gguf"
    "$slipway" llm make-test-model "$file" --type "$type" "${shape[@]}" --vocab 32000 --context 1024 >/dev/null
    echo "== $size $type"
    "$slipway" --json llm bench "$file" --device cuda --sequences "${SEQUENCES:-1,16,64}" --threads "$(nproc)" \
      >"$out/${size}_$type.json" 2> >(tee -a "$out/errors.log" >&2) || true
    cat "$out/${size}_$type.json"
  done
done
