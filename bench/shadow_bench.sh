#!/usr/bin/env bash
# What a shadow costs the live answers: one server, an endpoint on the lending GBDT (200 trees x
# depth 8) with and without a shadow version (a second GBDT of the same size) mirroring every
# request, driven by the same open-loop client (`slipway loadtest`, latency from each request's
# intended send time) at a fixed rate. Rounds alternate off, on, off, on ... so both see the same
# machine; reports the median live p50/p99 of each and the ratio of the medians.
# Usage: bench/shadow_bench.sh [BUILD_DIR] [RATE] [ROUNDS] [SECONDS]   (build/release, 1500, 5, 10)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
rate=${2:-1500} rounds=${3:-5} seconds=${4:-10}
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT
source "$root/bench/serve_helpers.sh"
slipway() { "$build/slipway" --home "$work/ws" "$@"; }

for seed in 1 2; do
  slipway -q train --data "$root/data/lending_club.csv" --target Class --model gbdt --param rounds=200 \
    --param max_depth=8 --seed "$seed" --register trees --no-progress > /dev/null
done
slipway deploy web trees@1 > /dev/null
start_server
echo "shadow cost at $rate req/s, $rounds rounds of $seconds s (live p50 / p99 in ms)"
for round in $(seq "$rounds"); do
  for mode in off on; do
    if [[ $mode == on ]]; then slipway deploy web --shadow trees@2 > /dev/null; else slipway deploy web --no-shadow > /dev/null; fi
    sleep 1.5  # the server picks the change up within a second
    slipway --json loadtest "$base/v2/models/web/infer" --csv "$root/data/lending_club.csv" --skip Class \
      --rate "$rate" --duration "${seconds}s" --warmup 1s --no-progress 2> /dev/null > "$work/$mode.$round.json"
  done
done
curl -s "$base/metrics" | grep -E '^slipway_shadow_requests_total' || true
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def load(mode):
    runs = [json.load(open(f"{work}/{mode}.{r}.json")) for r in range(1, rounds + 1)]
    return runs, statistics.median(r["latency_ms"]["p50"] for r in runs), statistics.median(r["latency_ms"]["p99"] for r in runs)
(off, off50, off99), (on, on50, on99) = load("off"), load("on")
failed = sum(r["requests"] - r["succeeded"] for r in off + on)
print(f"  without shadow: p50 {off50:.3f}  p99 {off99:.3f}")
print(f"  with shadow:    p50 {on50:.3f}  p99 {on99:.3f}")
print(f"  ratio (with / without): p50 {on50/off50:.3f}  p99 {on99/off99:.3f}   failed requests: {failed}")
PY
