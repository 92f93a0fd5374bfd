#!/usr/bin/env bash
# Dynamic batching for MLPs: throughput at saturation (closed loop, 64 connections, one row per
# request, `slipway loadtest`) with batching off and on (--max-batch-size 64 --max-queue-delay-us
# 500 --instances 2), for two MLPs trained on lending_club: the default 64,64 (its per-row compute is
# small next to HTTP's cost) and 1024,1024 (4.7 MB of float32 weights: a one-row product reads
# every weight for one row, a batched one reuses them for every row of the batch). Off and on
# alternate three times; medians and the median of the per-round ratios are reported.
# Usage: bench/mlp_batching_bench.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
work=$(mktemp -d)
source "$root/bench/serve_helpers.sh"
trap 'stop_server; rm -rf "$work"' EXIT
slipway() { "$build/slipway" --home "$work/ws" "$@"; }
field() { /usr/bin/python3 -c "import json,sys; r=json.load(sys.stdin); print($1)"; }
median() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
for units in 64,64 1024,1024; do
  name="mlp${units//,/x}"
  slipway -q train --data "$root/data/lending_club.csv" --target Class --model mlp --param hidden_units=$units \
    --param epochs=2 --register "$name" --no-progress > /dev/null
done
saturate() {
  slipway --json -q loadtest "$base/v2/models/$1/infer" --csv "$root/data/lending_club.csv" --skip Class \
    --rows-per-request 1 --concurrency 64 --threads 2 --duration 4s --warmup 1s --no-progress | field 'r["achieved_rate"]'
}
for units in 64,64 1024,1024; do
  name="mlp${units//,/x}"
  offs=() ons=() ratios=()
  for _ in 1 2 3; do
    start_server
    off=$(saturate "$name")
    start_server --max-batch-size 64 --max-queue-delay-us 500 --instances 2
    on=$(saturate "$name")
    batch=$(curl -s "$base/metrics" | /usr/bin/python3 -c '
import re, sys
text = sys.stdin.read()
calls = sum(float(v) for v in re.findall(r"slipway_batch_executions_total\{[^}]*\} (\S+)", text))
rows = sum(float(v) for v in re.findall(r"slipway_batch_rows_total\{[^}]*\} (\S+)", text))
print(f"{rows / max(calls, 1):.1f}")')
    offs+=("$off") ons+=("$on") ratios+=("$(/usr/bin/python3 -c "print($on / $off)")")
  done
  printf 'MLP %s, 1 row/request, batching off vs on: %.0f vs %.0f req/s; on/off median of per-round ratios %.2f (rounds: %s); mean batch %s rows\n' \
    "$units" "$(median "${offs[@]}")" "$(median "${ons[@]}")" "$(median "${ratios[@]}")" \
    "$(printf '%.2f ' "${ratios[@]}")" "$batch"
done
