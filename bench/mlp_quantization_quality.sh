#!/usr/bin/env bash
# What lower precision costs an MLP in quality on the real data sets: an MLP (256,256, 10 epochs)
# trained on a random 80% of each set, then `slipway optimize --candidates quantize,int8` on the
# other 20% (bf16; int8 with per-row activation scales; int8 calibrated on 2,000 training rows by
# max and by the 99.99th percentile), reporting each candidate's test metric and its drop from the
# float32 model (AUC for the binary sets, RMSE for the regressions; a negative drop is a gain).
# lending_club and chicago ship with the repository; fertility and diamonds are read from
# ../shared/data when present. Usage: bench/mlp_quantization_quality.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
slipway() { "$build/slipway" --home "$work/ws" "$@"; }
shared="$root/../shared/data"
sets=("lending_club:$root/data/lending_club.csv:Class:" "chicago:$root/data/chicago_ridership.csv:ridership:date")
[ -f "$shared/fertility.csv" ] && sets+=("fertility:$shared/fertility.csv:morekids:")
[ -f "$shared/diamonds.csv" ] && sets+=("diamonds:$shared/diamonds.csv:price:")
for entry in "${sets[@]}"; do
  IFS=: read -r name file target ignore <<< "$entry"
  /usr/bin/python3 - "$file" "$work/$name" "$ignore" <<'PY'
import sys
import pandas as pd
frame = pd.read_csv(sys.argv[1])
if sys.argv[3]:
    frame = frame.drop(columns=[sys.argv[3]])
frame = frame.sample(frac=1.0, random_state=7)
cut = int(0.8 * len(frame))
frame[:cut].to_csv(sys.argv[2] + "_train.csv", index=False)
frame[cut:].to_csv(sys.argv[2] + "_test.csv", index=False)
frame[:2000].to_csv(sys.argv[2] + "_calibration.csv", index=False)
PY
  slipway -q train --data "$work/${name}_train.csv" --target "$target" --model mlp --param hidden_units=256,256 \
    --param epochs=10 --register "$name" --no-progress > /dev/null
  slipway --json -q optimize "$name" --data "$work/${name}_test.csv" --calibration "$work/${name}_calibration.csv" \
    --candidates quantize,int8 --duration 1s --no-progress | /usr/bin/python3 -c "
import json, sys
report = json.load(sys.stdin)
metric = report['quality_metric']
for c in report['candidates']:
    if c.get('error'):
        continue
    print(f\"$name {metric} {c['name']:24} {c['quality']:.4f}  drop {c['quality_drop']:+.4f}\")
"
done
