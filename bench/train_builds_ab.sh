#!/usr/bin/env bash
# Training time of two builds of Slipway, side by side: the same GBDT (lending_club, 200 trees x
# depth 8) and the same logistic regression, trained by each build in alternation (A, B, A, B ...)
# so both see the same machine. Reports the median seconds and the median of the per-round B/A
# ratios. Usage: bench/train_builds_ab.sh BUILD_A BUILD_B [ROUNDS]   (default 5 rounds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_a=$(cd "$1" && pwd) build_b=$(cd "$2" && pwd)
rounds=${3:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# seconds BUILD MODEL: one training run in a fresh workspace (no step cache), wall seconds.
seconds() {
  local home="$work/$RANDOM$RANDOM"
  local started ended
  started=$(date +%s%N)
  "$1/slipway" --home "$home" -q train --data "$root/data/lending_club.csv" --target Class --model "$2" \
    "${@:3}" --no-progress > /dev/null
  ended=$(date +%s%N)
  rm -rf "$home"
  awk -v ns=$((ended - started)) 'BEGIN { printf "%.3f\n", ns / 1e9 }'
}
results=()
for _ in $(seq "$rounds"); do
  for side in a b; do
    build_var="build_$side"
    gbdt=$(seconds "${!build_var}" gbdt --param rounds=200 --param max_depth=8)
    logistic=$(seconds "${!build_var}" logistic)
    results+=("$side $gbdt $logistic")
  done
done
printf '%s\n' "${results[@]}" > "$work/results"
/usr/bin/python3 - "$work/results" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
a = [(float(g), float(l)) for side, g, l in rows if side == "a"]
b = [(float(g), float(l)) for side, g, l in rows if side == "b"]
for k, name in ((0, "gbdt 200 x depth 8"), (1, "logistic")):
    ma, mb = statistics.median(x[k] for x in a), statistics.median(x[k] for x in b)
    ratios = [y[k] / x[k] for x, y in zip(a, b)]
    print(f"{name:20s} A {ma:6.2f} s   B {mb:6.2f} s   B/A {statistics.median(ratios):.3f}"
          f"   (per-round B/A {min(ratios):.2f}..{max(ratios):.2f})")
PY
