#!/usr/bin/env bash
# The LLM engine against llama.cpp on the same GGUF files, in llama-bench's method: pp512 (prompt
# tokens/s) and tg128 (generated tokens/s), mean ± sd over repetitions, at 1 and 2 threads, with
# the roofline (the bytes one decoded token reads ÷ the read bandwidth measured over a buffer of
# that size) and pp's integer operations per second against the measured vpdpbusd peak.
# llama.cpp runs through node-llama-cpp 3.21.1's prebuilt CPU library (installed on first use),
# with its weights read into memory rather than mapped from the file (PEER_MMAP=1 maps them):
# measured on 1B Q4_0, one thread, it decoded 25-27 tokens/s that way and 14-17 mapped.
#
# Usage: bench/llm_peer.sh BUILD_DIR [110m|1b|all] [REPETITIONS]
# Models are random-weight test models (no real weights can be downloaded here), written once
# into $SLIPWAY_BENCH_MODELS (default ~/.cache/slipway-bench-models): 110M = dim 768, 12 layers,
# 12 heads, vocabulary 32,000 (llama2.c's 110M shape); 1B = dim 2048, 16 layers, 32 heads with 8
# key/value heads, feed-forward 8192 (Llama-3.2-1B's shape with a 32,000 vocabulary).
set -euo pipefail
build=${1:?usage: bench/llm_peer.sh BUILD_DIR [110m|1b|all] [REPETITIONS]}
which=${2:-110m}
reps=${3:-5}
slipway="$build/slipway"
here=$(cd "$(dirname "$0")" && pwd)
models=${SLIPWAY_BENCH_MODELS:-$HOME/.cache/slipway-bench-models}
peers="$HOME/.cache/slipway-peers-llama"
mkdir -p "$models"
if [[ ! -f "$peers/node_modules/node-llama-cpp/dist/index.js" ]]; then
  timeout 180 npm install --prefix "$peers" -E --omit=optional --no-audit --no-fund \
    node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 >/dev/null
fi

make_model() {  # NAME TYPE ARGS...
  local path="$models/$1_$2.gguf"
  if [[ ! -f "$path" ]]; then
    "$slipway" llm make-test-model "$path" --type "$2" "${@:3}" >&2
  fi
  echo "$path"
}

shapes=()
[[ $which == 110m || $which == all ]] && shapes+=("110m")
[[ $which == 1b || $which == all ]] && shapes+=("1b")
echo "| model | weights | test | threads | Slipway t/s | llama.cpp t/s | ratio | Slipway vs roofline / peak |"
echo "|---|---|---|---|---|---|---|---|"
for shape in "${shapes[@]}"; do
  if [[ $shape == 110m ]]; then
    args=(--layers 12 --dim 768 --heads 12 --kv-heads 12 --ff 2048 --vocab 32000 --context 1024)
  else
    args=(--layers 16 --dim 2048 --heads 32 --kv-heads 8 --ff 8192 --vocab 32000 --context 1024)
  fi
  for type in f16 q8_0 q4_0 q4_k; do
    file=$(make_model "$shape" "$type" "${args[@]}")
    ours=$("$slipway" --json llm bench "$file" --threads 1,2 --repetitions "$reps")
    peer=""
    for threads in 1 2; do
      peer+=$(PEER_MMAP=${PEER_MMAP:-0} node "$here/llm_peer.mjs" "$peers/node_modules" "$file" "$threads" 512 128 "$reps")$'\n'
    done
    /usr/bin/python3 - "$shape" "$type" "$ours" "$peer" <<'PY'
import json, sys
shape, kind, ours, peer = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
theirs = {(r["test"], r["threads"]): r for r in map(json.loads, filter(None, peer.splitlines()))}
for r in ours["results"]:
    p = theirs.get((r["test"], r["threads"]))
    limit = (f'{100 * r["fraction_of_roofline"]:.0f}% of {r["roofline_tokens_per_second"]:.0f} t/s'
             if "fraction_of_roofline" in r else f'{r["gops"]:.0f} GOP/s, {100 * r["gops"] / r["int8_peak_gops"]:.0f}% of {r["int8_peak_gops"]:.0f}'
             if r.get("int8_peak_gops") else "")
    ratio = f'{r["tokens_per_second"] / p["tokens_per_second"]:.2f}x' if p else "-"
    peer_text = f'{p["tokens_per_second"]:.1f} ± {p["deviation"]:.1f}' if p else "-"
    print(f'| {shape} ({ours["bytes"] / 1e6:.0f} MB) | {kind} | {r["test"]} | {r["threads"]} | '
          f'{r["tokens_per_second"]:.1f} ± {r["deviation"]:.1f} | {peer_text} | {ratio} | {limit} |')
# Each engine at its best thread count.
for test in sorted({r["test"] for r in ours["results"]}):
    mine = max((r for r in ours["results"] if r["test"] == test), key=lambda r: r["tokens_per_second"])
    rivals = [p for (t, _), p in theirs.items() if t == test]
    if not rivals:
        continue
    best = max(rivals, key=lambda p: p["tokens_per_second"])
    print(f'| {shape} ({ours["bytes"] / 1e6:.0f} MB) | {kind} | {test}, best | {mine["threads"]} / {best["threads"]} | '
          f'{mine["tokens_per_second"]:.1f} | {best["tokens_per_second"]:.1f} | '
          f'{mine["tokens_per_second"] / best["tokens_per_second"]:.2f}x | |')
PY
  done
done
