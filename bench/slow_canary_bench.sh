#!/usr/bin/env bash
# A slow canary under load, with and without an endpoint deadline: the stable version answers in
# about a millisecond; the canary (the same model under another name, whose batcher waits 300 ms
# for company) is rolled out at 20% with fallback to the main version. The same open-loop client
# (`slipway loadtest`, latency from each request's intended send time) measures what clients see
# while the analysis decides: without a deadline every canary request takes ~300 ms until the
# rollback; with --deadline 50ms the main version answers those at the deadline. Reports each
# run's p50/p99, failed requests, how the rollout ended, and the ratio of the p99s.
# Usage: bench/slow_canary_bench.sh [BUILD_DIR] [RATE] [SECONDS]   (build/release, 300, 8)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
rate=${2:-300} seconds=${3:-8}
work=$(mktemp -d)
trap 'stop_server; rm -rf "$work"' EXIT
source "$root/bench/serve_helpers.sh"
slipway() { "$build/slipway" --home "$work/ws" "$@"; }

for name in stable slow; do
  slipway -q train --data "$root/data/lending_club.csv" --target Class --register "$name" --no-progress > /dev/null
done
slipway serving-config slow --max-batch-size 64 --max-queue-delay-us 300000 > /dev/null
start_server
echo "a slow canary at 20% under $rate req/s for $seconds s (client latency in ms)"
for deadline in 0 50ms; do
  slipway deploy web stable@1 --fallback main --deadline "$deadline" > /dev/null
  sleep 1.5  # the server picks the change up within a second
  slipway --json loadtest "$base/v2/models/web/infer" --csv "$root/data/lending_club.csv" --skip Class \
    --rate "$rate" --duration "${seconds}s" --no-progress 2> /dev/null > "$work/load.$deadline.json" &
  load=$!
  sleep 1
  slipway deploy web slow@1 --steps 20,100 --interval 60s --min-requests 30 > /dev/null
  wait "$load"
  slipway --json rollout status web > "$work/rollout.$deadline.json"
done
curl -s "$base/metrics" | grep -E '^slipway_endpoint_fallbacks_total' || true
/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
p99 = {}
for deadline in ("0", "50ms"):
    load = json.load(open(f"{work}/load.{deadline}.json"))
    rollout = json.load(open(f"{work}/rollout.{deadline}.json"))
    p99[deadline] = load["latency_ms"]["p99"]
    label = "without a deadline" if deadline == "0" else f"deadline {deadline}    "
    print(f"  {label}: p50 {load['latency_ms']['p50']:.2f}  p99 {p99[deadline]:.2f}  "
          f"failed {load['requests'] - load['succeeded']} of {load['requests']}  "
          f"rollout {rollout['state']}: {rollout['reason']}")
print(f"  ratio of p99 (deadline / none): {p99['50ms'] / p99['0']:.3f}")
PY
