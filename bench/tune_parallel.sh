#!/usr/bin/env bash
# `slipway tune --parallel 2` against one worker on the same machine, in one run: a 40-trial
# random-search study of Slipway's GBDT (100 rounds) on the lending data, all cores each way (one
# worker trains on every core; two train a trial each on half). Wall times alternate between the
# two settings, REPEATS times each; the ratio of the medians is the figure.
# Usage: bench/tune_parallel.sh [BUILD_DIR] [REPEATS] [TRIALS]
set -euo pipefail
build=${1:-build/release}
repeats=${2:-3}
trials=${3:-40}
root=$(cd "$(dirname "$0")/.." && pwd)
slipway=$(cd "$build" && pwd)/slipway
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$slipway" --home "$work/home" init > /dev/null
run() {  # parallel repeat -> seconds
  local start end
  start=$(date +%s.%N)
  "$slipway" --home "$work/home" -q tune --study "p$1-r$2" --data "$root/data/lending_club.csv" --target Class \
    --model gbdt --param rounds=100 --sampler random --trials "$trials" --parallel "$1" --no-progress --no-cache \
    > /dev/null
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f\n", b - a }'
}
one=() two=()
for repeat in $(seq 1 "$repeats"); do
  one+=("$(run 1 "$repeat")")
  two+=("$(run 2 "$repeat")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
m1=$(median "${one[@]}")
m2=$(median "${two[@]}")
echo "$trials trials, $(nproc) cores: one worker ${one[*]} s (median $m1), two workers ${two[*]} s (median $m2)"
awk -v a="$m1" -v b="$m2" 'BEGIN { printf "two workers / one worker, wall time: %.2f\n", b / a }'
