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
$py - "$root/data" "$work" <<'PY'
import csv, random, sys
source, out = sys.argv[1], sys.argv[2]
for name, shuffle in (("lending_club", True), ("chicago_ridership", False)):
    with open(f"{source}/{name}.csv", newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    if shuffle:
        random.Random(0).shuffle(body)
    a, b = int(len(body) * 0.6), int(len(body) * 0.8)
    for part, chunk in (("train", body[:a]), ("valid", body[a:b]), ("test", body[b:])):
        with open(f"{out}/{name}_{part}.csv", "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(chunk)
PY
"$slipway" --home "$work/home" init > /dev/null
echo "| data set | metric | Slipway AutoML ($budget) | XGBoost defaults | HistGradientBoosting defaults | AutoML winner |"
echo "|---|---|---|---|---|---|"
compare() {  # name target metric [ignored column]
  local name=$1 target=$2 metric=$3 ignored=${4:-}
  local -a ignore=()
  [ -n "$ignored" ] && ignore=(--ignore "$ignored")
  local train="$work/${name}_train.csv" valid="$work/${name}_valid.csv" test="$work/${name}_test.csv"
  "$slipway" --home "$work/home" -q --json tune --auto --study "auto-$name" --data "$train" --valid "$valid" \
    --target "$target" "${ignore[@]}" --budget "$budget" --register "auto-$name" --no-progress > "$work/$name.json"
  local winner ours
  winner=$($py -c 'import json, sys; print(json.load(open(sys.argv[1]))["leaderboard"][0]["family"])' "$work/$name.json")
  ours=$("$slipway" --home "$work/home" -q --json eval "auto-$name" --data "$test" --no-cache |
    $py -c 'import json, sys; print("%.6g" % json.load(sys.stdin)["metrics"]["overall"][sys.argv[1]])' "$metric")
  read -r _ xgb _ hgb <<< "$($py "$here/automl_peer.py" "$train" "$valid" "$test" "$target" "$metric" $ignored)"
  echo "| $name | $metric | $ours | $xgb | $hgb | $winner |"
}
compare lending_club Class auc
compare chicago_ridership ridership rmse date
