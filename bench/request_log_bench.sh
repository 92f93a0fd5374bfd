#!/usr/bin/env bash
# What the request log costs serving: one server, the lending GBDT (100 trees), the same
# closed-loop client (`slipway loadtest --concurrency 8`), rounds alternating the model's
# request_log_rate between 0 and RATE (default 0.1, the issue's 10%); reports the median
# throughput of each and their ratio. On 2 cores the client shares the machine with the server,
# as it does for both settings.
# Usage: bench/request_log_bench.sh [BUILD_DIR] [RATE] [ROUNDS] [SECONDS]   (build/release, 0.1, 5, 8)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
rate=${2:-0.1} rounds=${3:-5} seconds=${4:-8}
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT
source "$root/bench/serve_helpers.sh"
slipway() { "$build/slipway" --home "$work/ws" "$@"; }

slipway -q train --data "$root/data/lending_club.csv" --target Class --model gbdt --param rounds=100 \
  --register trees --no-progress > /dev/null
start_server
echo "request log cost, $rounds rounds of $seconds s, closed loop of 8 (requests/s)"
for round in $(seq "$rounds"); do
  for mode in off on; do
    slipway serving-config trees --request-log-rate "$([[ $mode == on ]] && echo "$rate" || echo 0)" > /dev/null
    sleep 1.5  # the server picks the change up within a second
    slipway --json loadtest "$base/v2/models/trees/infer" --csv "$root/data/lending_club.csv" --skip Class \
      --concurrency 8 --duration "${seconds}s" --warmup 1s --no-progress 2> /dev/null > "$work/$mode.$round.json"
  done
done
curl -s "$base/metrics" | grep -E '^slipway_request_log' || true
/usr/bin/python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def throughput(mode):
    runs = [json.load(open(f"{work}/{mode}.{r}.json")) for r in range(1, rounds + 1)]
    return statistics.median(r["achieved_rate"] for r in runs), sum(r["requests"] - r["succeeded"] for r in runs)
off, off_failed = throughput("off")
on, on_failed = throughput("on")
print(f"  request log off: {off:9.0f} req/s")
print(f"  request log on:  {on:9.0f} req/s")
print(f"  ratio (on / off): {on / off:.3f}   failed requests: {off_failed + on_failed}")
PY
