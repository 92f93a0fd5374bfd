#!/usr/bin/env bash
# Test metrics of one GBDT on lending_club (5% "bad") at the default threshold and by each rule.
set -euo pipefail
bin=${1:-build/release/slipway}
home=$(mktemp -d)
$bin --home "$home" init > /dev/null
for rule in "" f1 "recall>=0.5" "precision>=0.3" cost=10; do
  args=(--home "$home" --json train --data data/lending_club.csv --target Class --model gbdt --split stratified --no-progress)
  [ -n "$rule" ] && args+=(--threshold "$rule")
  $bin "${args[@]}" 2>/dev/null | python3 -c '
import json,sys
r=json.load(sys.stdin); m=r["metrics"]["overall"] if "overall" in r["metrics"] else r["metrics"]
print("| %-16s | %.4g | %.4f | %.4f | %.4f | %.4f | %.4f |" % (sys.argv[1] or "(0.5)", r.get("decision_threshold",0.5), m["precision"], m["recall"], m["f1"], m["pr_auc"], m["auc"]))' "$rule"
done
rm -rf "$home"
