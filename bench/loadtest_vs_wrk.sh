#!/usr/bin/env bash
# Cross-checks `slipway loadtest` against wrk (Debian's wrk 4.1) on the same server and endpoint:
# both run closed loop with the same connections and threads against `slipway serve`'s
# /v2/health/live (the server's physical limit: no model work), one after the other, three times
# each, and the medians of their throughputs are compared. They should agree within 10%.
# Usage: bench/loadtest_vs_wrk.sh [BUILD_DIR] [CONNECTIONS] [SECONDS]   (default build/release 64 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
connections=${2:-64}
seconds=${3:-5}
work=$(mktemp -d)
source "$root/bench/serve_helpers.sh"
trap 'stop_server; rm -rf "$work"' EXIT
"$build/slipway" --home "$work/ws" -q init > /dev/null
start_server
url="$base/v2/health/live"
ours=() theirs=()
for _ in 1 2 3; do
  ours+=("$("$build/slipway" --json -q loadtest "$url" --concurrency "$connections" --threads 2 \
    --duration "${seconds}s" --warmup 1s --no-progress | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["achieved_rate"])')")
  theirs+=("$(wrk -t2 -c"$connections" -d"${seconds}s" --latency "$url" | awk '/Requests\/sec/ {print $2}')")
done
/usr/bin/python3 - "${ours[*]}" "${theirs[*]}" "$connections" <<'PY'
import statistics, sys
ours = [float(x) for x in sys.argv[1].split()]
theirs = [float(x) for x in sys.argv[2].split()]
o, t = statistics.median(ours), statistics.median(theirs)
print(f"/v2/health/live, closed loop, {sys.argv[3]} connections, 2 client threads (median of 3):")
print(f"  slipway loadtest {o:10.0f} req/s   wrk {t:10.0f} req/s   ratio {o / t:.3f}")
print(f"  runs: loadtest {', '.join(f'{x:.0f}' for x in ours)}; wrk {', '.join(f'{x:.0f}' for x in theirs)}")
PY
