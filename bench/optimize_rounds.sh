#!/usr/bin/env bash
# optimize's interleaved throughput rounds: the same GBDT's exact candidates (quantize, serving
# configurations) twice, each row's max rate and its rounds' median and range.
set -euo pipefail
bin=${1:-build/release/slipway}
home=$(mktemp -d)
$bin --home "$home" init > /dev/null
$bin --home "$home" train --data data/lending_club.csv --target Class --model gbdt --register lending --no-progress > /dev/null 2>&1
for run in 1 2; do
  $bin --home "$home" --json optimize lending --data data/lending_club.csv --candidates quantize,serving \
       --duration 1s --no-progress 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin)
rec=r.get("recommended")
for c in r["candidates"]:
    t=c.get("throughput",{})
    print("| %s | %-22s | %6.0f | %s | %s |" % (sys.argv[1], c["name"], c.get("max_rate",0) or 0,
          "%.0f (%.0f-%.0f)" % (t["median"],t["low"],t["high"]) if t.get("rounds") else "-", "*" if c["name"]==rec else ""))
print("reason:", r.get("reason"))' "$run"
done
rm -rf "$home"
