#!/usr/bin/env bash
# Tensor parallelism on a CPU: `slipway llm bench` over the same file and threads, the pass unsplit
# (one rank) and split over RANKS ranks (Megatron-LM's split, thread groups of THREADS / RANKS),
# in one run: pp and tg tokens/s and their ratios, and the split pass's logits against the unsplit
# one's on a 512-token prompt (largest and RMS difference, top-token agreement). The peer is the
# unsplit pass: on one socket the split buys nothing but its structure (the all-reduces cost
# two barriers a layer); the figures say what it costs and that its logits are the same.
#
# Usage: bench/llm_tensor_parallel.sh BUILD_DIR [MODEL.gguf...]
# Default models: the 110M Q8_0 and F16 files of $SLIPWAY_BENCH_MODELS (~/.cache/slipway-bench-models),
# written on first use. Environment: RANKS [2]  THREADS [all cores]  REPETITIONS [5]
set -euo pipefail
build=${1:?usage: bench/llm_tensor_parallel.sh BUILD_DIR [MODEL.gguf...]}
shift
slipway="$build/slipway"
models=${SLIPWAY_BENCH_MODELS:-$HOME/.cache/slipway-bench-models}
ranks=${RANKS:-2}
threads=${THREADS:-$(nproc)}
repetitions=${REPETITIONS:-5}

files=("$@")
if [[ ${#files[@]} -eq 0 ]]; then
  mkdir -p "$models"
  for type in q8_0 f16; do
    file="$models/110m_$type.gguf"
    if [[ ! -f $file ]]; then
      "$slipway" llm make-test-model "$file" --type "$type" --layers 12 --dim 768 --heads 12 --kv-heads 12 --ff 2048 \
        --vocab 32000 --context 1024 >&2
    fi
    files+=("$file")
  done
fi

work=$(mktemp -d /tmp/llm_tensor_parallel.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "$ranks ranks against one, $threads threads, $repetitions repetitions per test" >&2
for file in "${files[@]}"; do
  name=$(basename "$file" .gguf)
  for tp in 1 "$ranks"; do
    echo "  $name, $tp rank(s)" >&2
    "$slipway" --json llm bench "$file" --threads "$threads" --tp "$tp" --repetitions "$repetitions" --no-bandwidth \
      >"$work/$name.$tp.json"
  done
done

/usr/bin/python3 - "$work" "$ranks" "${files[@]}" <<'EOF'
import json, os, sys
work, ranks, files = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"| model | test | 1 rank tokens/s | {ranks} ranks tokens/s | ratio |")
print("|---|---|---|---|---|")
notes = []
for path in files:
    name = os.path.basename(path)[:-len(".gguf")]
    one = json.load(open(os.path.join(work, f"{name}.1.json")))
    split = json.load(open(os.path.join(work, f"{name}.{ranks}.json")))
    for a, b in zip(one["results"], split["results"]):
        ratio = b["tokens_per_second"] / a["tokens_per_second"]
        print(f'| {name} | {a["test"]} | {a["tokens_per_second"]:.1f} ± {a["deviation"]:.1f} | '
              f'{b["tokens_per_second"]:.1f} ± {b["deviation"]:.1f} | {ratio:.2f}x |')
    q = split.get("tensor_parallel_quality")
    if q:
        notes.append(f'{name}: {ranks} ranks against one over {q["positions"]} positions: logits differ by at most '
                     f'{q["max_abs_logit_difference"]:.2g}, RMS {q["rms_logit_difference"]:.2g} (logit RMS '
                     f'{q["logit_rms"]:.3f}); the same top token at {100 * q["top1_agreement"]:.1f}% of positions')
print()
print("\n".join(notes))
EOF
