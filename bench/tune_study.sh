#!/usr/bin/env bash
# `slipway tune` against Optuna 3.1 (Debian's python3-optuna) on the shared data, in one run:
# both tune Slipway's GBDT (100 rounds) over the same space (bench/tune_study_space.yaml), judged
# on the same held-out file by the same metric, with the same trial budget, for seeds 1..SEEDS
# (Optuna's trials run `slipway train`: bench/tune_study_peer.py). Reports per data set:
#   - TPE's mean best value, Slipway's and Optuna's, and each one's study overhead per trial
#     (Slipway: claiming a trial in the store, sampler included; Optuna: ask() and suggest);
#   - TPE against random search: the trials TPE needs to reach random's final best (mean);
#   - pruning against the same study unpruned (both holding out validation rows per round): the
#     pruned study runs up to 4x the trials, and its best is taken among the trials it ran within
#     half the unpruned study's boosting rounds (summed over trials, in trial order).
# Usage: bench/tune_study.sh [BUILD_DIR] [SEEDS] [TRIALS] [PRUNER (default asha; none skips the
#        pruning comparison)] [SAMPLER (tpe, the default, or tpe:multivariate: Optuna's TPE then
#        runs with multivariate=True too)]
set -euo pipefail
build=${1:-build/release}
seeds=${2:-5}
trials=${3:-30}
pruner=${4:-asha}
sampler=${5:-tpe}
case $sampler in
  tpe) export OPTUNA_MULTIVARIATE=0 ;;
  tpe:multivariate) export OPTUNA_MULTIVARIATE=1 ;;
  *) echo "SAMPLER is tpe or tpe:multivariate" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
slipway=$(cd "$build" && pwd)/slipway
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3

# Train and held-out files: lending (binary, 80/20 by a seeded shuffle) and Chicago ridership
# (regression, the last 20% of days held out).
$py "$here/split_shared_data.py" "$root/data" "$work" train=0.8 valid

# One study's JSON -> "best rounds_trained claim_ms_mean best_so_far_by_trial"
summarize() {
  $py -c '
import json, sys
study = json.load(sys.stdin)
maximize = study["objectives"][0]["direction"] == "maximize"
best, history, rounds, claims = None, [], 0, []
for trial in study["trials"]:
    rounds += trial.get("last_step", 0)
    if "claim_ms" in trial["measures"]:
        claims.append(trial["measures"]["claim_ms"])
    if trial["state"] == "complete" and trial["values"]:
        value = trial["values"][0]
        if best is None or (value > best if maximize else value < best):
            best = value
    history.append("%.6g" % best if best is not None else "nan")
print("%.6g %d %.3f %s" % (best, rounds, sum(claims) / max(len(claims), 1), ",".join(history)))'
}

# A pruned study's JSON and a rounds budget -> "best rounds_used trials_used": the best complete
# trial among those that ran before the study's boosting rounds (summed in trial order) passed
# the budget.
best_within() {
  $py -c '
import json, sys
study, budget = json.load(sys.stdin), int(sys.argv[1])
maximize = study["objectives"][0]["direction"] == "maximize"
best, used, count = None, 0, 0
for trial in study["trials"]:
    if used + trial.get("last_step", 0) > budget:
        break
    used += trial.get("last_step", 0)
    count += 1
    if trial["state"] == "complete" and trial["values"]:
        value = trial["values"][0]
        if best is None or (value > best if maximize else value < best):
            best = value
print("%.6g %d %d" % (best if best is not None else float("nan"), used, count))' "$1"
}

# Trials needed to reach `target` in a best-so-far history (direction-aware), else TRIALS + 1.
trials_to_reach() {
  $py -c '
import sys
history, target, maximize = sys.argv[1].split(","), float(sys.argv[2]), sys.argv[3] == "maximize"
for i, value in enumerate(history):
    if value != "nan" and (float(value) >= target if maximize else float(value) <= target):
        print(i + 1); break
else:
    print(len(history) + 1)' "$@"
}

report() {  # name target metric direction
  local name=$1 target=$2 metric=$3 direction=$4
  local train="$work/${name}_train.csv" valid="$work/${name}_valid.csv"
  local home="$work/home-$name"
  "$slipway" --home "$home" init > /dev/null
  local -a common=(--data "$train" --valid "$valid" --target "$target" --model gbdt --param rounds=100
                   --space "$here/tune_study_space.yaml" --objective "$metric:$direction"
                   --json --no-progress --no-cache -q)
  : > "$work/$name.rows"
  for seed in $(seq 1 "$seeds"); do
    local tpe random optuna asha full
    tpe=$("$slipway" --home "$home" tune --study "tpe-$seed" --seed "$seed" --trials "$trials" --sampler "$sampler" \
      "${common[@]}" | summarize)
    random=$("$slipway" --home "$home" tune --study "random-$seed" --seed "$seed" --trials "$trials" --sampler random "${common[@]}" |
      summarize)
    optuna=$($py "$here/tune_study_peer.py" "$slipway" "$home" "$train" "$valid" "$target" "$metric" "$direction" \
      "$seed" "$trials" rounds=100)
    if [ "$pruner" = none ]; then
      full="nan 1 0 nan"
      asha="nan 0 0"
    else
      full=$("$slipway" --home "$home" tune --study "full-$seed" --seed "$seed" --param early_stopping_rounds=100000 \
        --trials "$trials" "${common[@]}" | summarize)
      read -r _ full_rounds_total _ _ <<< "$full"
      asha=$("$slipway" --home "$home" tune --study "asha-$seed" --seed "$seed" --pruner "$pruner" "${common[@]}" \
        --trials $((trials * 4)) | best_within $((full_rounds_total / 2)))
    fi
    read -r tpe_best _ tpe_claim tpe_history <<< "$tpe"
    read -r random_best _ _ _ <<< "$random"
    read -r _ optuna_best optuna_ask _ <<< "$optuna"
    read -r full_best full_rounds _ _ <<< "$full"
    read -r asha_best asha_rounds asha_trials <<< "$asha"
    local reach
    reach=$(trials_to_reach "$tpe_history" "$random_best" "$direction")
    echo "$seed $tpe_best $optuna_best $random_best $reach $tpe_claim $optuna_ask $full_best $full_rounds $asha_best $asha_rounds $asha_trials" \
      >> "$work/$name.rows"
  done
  echo "### $name ($metric, $direction; $seeds seeds x $trials trials; sampler $sampler)"
  echo
  echo "| seed | Slipway TPE | Optuna TPE | Slipway random | TPE trials to random's best | claim ms (Slipway) | ask ms (Optuna) | unpruned best | unpruned rounds | pruned best within half the rounds | its rounds | its trials |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  awk '{ printf "| %s |", $1; for (i = 2; i <= NF; ++i) printf " %s |", $i; printf "\n" }' "$work/$name.rows"
  awk -v direction="$direction" -v trials="$trials" -v pruner="$pruner" '
    { s += $2; o += $3; r += $4; reach += $5; claim += $6; ask += $7; fb += $8; fr += $9; ab += $10; ar += $11; n++ }
    END {
      printf "\nmean best: Slipway TPE %.5g, Optuna TPE %.5g (Slipway %s); random %.5g\n", s / n, o / n,
        (direction == "maximize" ? (s >= o ? "better or equal" : "worse") : (s <= o ? "better or equal" : "worse")), r / n
      printf "study overhead per trial, Slipway / Optuna: %.3f (%.2f ms / %.2f ms)\n", (claim / n) / (ask / n), claim / n, ask / n
      printf "TPE reaches random search'"'"'s final best in %.1f of %d trials (%.0f%%)\n", reach / n, trials, 100 * reach / n / trials
      if (pruner == "none") { printf "\n"; exit }
      printf "'"$pruner"' within half the unpruned study'"'"'s rounds: best %.5g vs unpruned %.5g (difference %.4f) at %.0f%% of the rounds\n\n", ab / n, fb / n,
        (direction == "maximize" ? fb / n - ab / n : ab / n - fb / n), 100 * ar / fr }' "$work/$name.rows"
}

report lending_club Class auc maximize
report chicago_ridership ridership rmse minimize
