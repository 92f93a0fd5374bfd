#!/usr/bin/env bash
# `slipway tune --auto` with a BUDGET against XGBoost's and scikit-learn HistGradientBoosting's
# defaults (bench/automl_peer.py), on the shared data, in one run. Each data set is cut 60/20/20:
# every model fits the first part; AutoML also judges its trials on the second; all are scored on
# the third, which no choice saw. Lending (binary, AUC): a seeded shuffle; Chicago ridership
# (regression, RMSE): in time order, the date column left out.
# Usage: bench/automl_defaults.sh [BUILD_DIR] [BUDGET]
set -euo pipefail
build=${1:-build/release}
budget=${2:-5m}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
slipway=$(cd "$build" && pwd)/slipway
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
$py "$here/split_shared_data.py" "$root/data" "$work" train=0.6 valid=0.8 test
"$slipway" --home "$work/home" init > /dev/null
echo "| data set | metric | Slipway AutoML ($budget) | XGBoost defaults | HistGradientBoosting defaults | AutoML winner | best single trial | ensemble (validation: it, best single) |"
echo "|---|---|---|---|---|---|---|---|"
compare() {  # name target metric [ignored column]
  local name=$1 target=$2 metric=$3 ignored=${4:-}
  local -a ignore=()
  [ -n "$ignored" ] && ignore=(--ignore "$ignored")
  local train="$work/${name}_train.csv" valid="$work/${name}_valid.csv" test="$work/${name}_test.csv"
  "$slipway" --home "$work/home" -q --json tune --auto --study "auto-$name" --data "$train" --valid "$valid" \
    --target "$target" "${ignore[@]}" --budget "$budget" --register "auto-$name" --no-progress > "$work/$name.json"
  local winner ours single ensemble best_run bundle
  # The winner, and the ensemble's line: its members and validation value against the best single
  # trial's, when one was built.
  read -r winner best_run ensemble <<< "$($py -c '
import json, sys
result = json.load(open(sys.argv[1]))
best = result["leaderboard"][0]
ensemble = result.get("ensemble")
winner = best["family"]
line = "none"
if ensemble:
    if ensemble["better"]:
        winner = "ensemble of %d %s" % (len(ensemble["members"]), ensemble["family"])
    line = "%d %s trials: %.6g vs %.6g" % (len(ensemble["members"]), ensemble["family"], ensemble["value"],
                                          best["best"]["value"])
print(winner.replace(" ", "_"), best["best"]["run_id"], line)' "$work/$name.json")"
  winner=${winner//_/ }
  score() {  # REFERENCE -> the metric on the test part
    "$slipway" --home "$work/home" -q --json eval "$1" --data "$test" --no-cache |
      $py -c 'import json, sys; print("%.6g" % json.load(sys.stdin)["metrics"]["overall"][sys.argv[1]])' "$metric"
  }
  ours=$(score "auto-$name")
  # The best single trial's bundle, scored the same way (the registered model when no ensemble won).
  bundle=$("$slipway" --home "$work/home" -q --json show "$best_run" |
    $py -c 'import json, sys; print(json.load(sys.stdin)["bundle_sha256"])')
  single=$(score "$work/home/artifacts/sha256/${bundle:0:2}/${bundle:2}")
  read -r _ xgb _ hgb <<< "$($py "$here/automl_peer.py" "$train" "$valid" "$test" "$target" "$metric" $ignored)"
  echo "| $name | $metric | $ours | $xgb | $hgb | $winner | $single | $ensemble |"
}
compare lending_club Class auc
compare chicago_ridership ridership rmse date
