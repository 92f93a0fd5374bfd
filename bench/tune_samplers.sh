#!/usr/bin/env bash
# Slipway's TPE, random and QMC (Sobol) samplers against Optuna 3.1's (Debian's python3-optuna) on the same
# synthetic objective over the same conditional space (bench/tune_sampler_bench.cpp,
# bench/tune_peer.py), each seed 1..SEEDS with TRIALS trials: the mean best value and the
# sampler's own time per trial, and their ratios, in one run.
# Usage: bench/tune_samplers.sh [BUILD_DIR] [SEEDS] [TRIALS]
set -euo pipefail
build=${1:-build/release}
seeds=${2:-20}
trials=${3:-60}
cmake --build "$build" --target slipway_tune_sampler_bench > /dev/null
summary() {  # mean best, median best, mean microseconds per trial
  sort -k2,2g | awk '{ best[NR] = $2; total += $2; us += $3 } END {
    n = NR; median = n % 2 ? best[(n + 1) / 2] : (best[n / 2] + best[n / 2 + 1]) / 2
    printf "%.5f %.5f %.1f\n", total / NR, median, us / NR }'
}
declare -A result
for sampler in tpe random qmc; do
  result[slipway_$sampler]=$("$build/bench/slipway_tune_sampler_bench" "$sampler" "$seeds" "$trials" | summary)
  result[optuna_$sampler]=$(/usr/bin/python3 "$(dirname "$0")/tune_peer.py" "$sampler" "$seeds" "$trials" | summary)
done
echo "$seeds seeds x $trials trials; best value: lower is better (0 is the optimum)"
echo
echo "| sampler | mean best | median best | sampler time per trial |"
echo "|---|---|---|---|"
for key in slipway_tpe optuna_tpe slipway_random optuna_random slipway_qmc optuna_qmc; do
  read -r mean median us <<< "${result[$key]}"
  echo "| ${key/_/ } | $mean | $median | $us us |"
done
read -r s_mean _ s_us <<< "${result[slipway_tpe]}"
read -r o_mean _ o_us <<< "${result[optuna_tpe]}"
read -r r_mean _ _ <<< "${result[slipway_random]}"
echo
awk -v s="$s_mean" -v o="$o_mean" -v su="$s_us" -v ou="$o_us" -v r="$r_mean" 'BEGIN {
  printf "TPE mean best, Slipway / Optuna: %.2f (below 1: Slipway finds better)\n", s / o
  printf "TPE sampler time per trial, Slipway / Optuna: %.4f\n", su / ou
  printf "Slipway TPE / Slipway random, mean best: %.2f\n", s / r }'
