#!/usr/bin/env bash
# Serving throughput of two builds of Slipway, side by side, measured by the same client (wrk), so
# a change in `slipway loadtest` cannot pass for a change in the server. Both servers run at once
# (an idle server costs nothing) on their own workspaces with the same GBDT (lending_club, 200
# trees x depth 8); rounds alternate A, B, A, B ... so both see the same machine, and each round
# measures /v2/health/live (no model work) and a one-row v2 JSON infer, closed loop, 64
# connections, 2 wrk threads. Reports the median throughputs and the median of the per-round B/A
# ratios. Usage: bench/serve_builds_ab.sh BUILD_A BUILD_B [ROUNDS] [SECONDS]   (default 5 rounds, 4 s)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_a=$(cd "$1" && pwd) build_b=$(cd "$2" && pwd)
rounds=${3:-5} seconds=${4:-4}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

# start NAME BUILD: trains the model into $work/NAME and serves it; sets url_NAME.
start() {
  "$2/slipway" --home "$work/$1" -q train --data "$root/data/lending_club.csv" --target Class --model gbdt \
    --param rounds=200 --param max_depth=8 --register trees --no-progress > /dev/null
  "$2/slipway" --home "$work/$1" serve --port 0 > "$work/$1.out" 2> "$work/$1.log" &
  pids+=($!)
  for _ in $(seq 100); do grep -q 'serving on' "$work/$1.out" 2>/dev/null && break; sleep 0.1; done
  printf -v "url_$1" 'http://127.0.0.1:%s' "$(grep -o '127.0.0.1:[0-9]*' "$work/$1.out" | head -1 | cut -d: -f2)"
}
start a "$build_a"
start b "$build_b"

# One row of the data as a v2 JSON request (FP32 for numbers, BYTES for text), posted by wrk.
/usr/bin/python3 - "$root/data/lending_club.csv" > "$work/body.json" <<'PY'
import csv, json, sys
with open(sys.argv[1]) as f:
    reader = csv.DictReader(f)
    row = next(reader)
inputs = []
for name, value in row.items():
    if name == "Class":
        continue
    try:
        inputs.append({"name": name, "datatype": "FP32", "shape": [1], "data": [float(value)]})
    except ValueError:
        inputs.append({"name": name, "datatype": "BYTES", "shape": [1], "data": [value]})
print(json.dumps({"inputs": inputs}))
PY
cat > "$work/post.lua" <<EOF2
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local file = io.open("$work/body.json")
wrk.body = file:read("*a")
file:close()
EOF2
curl -sf -d @"$work/body.json" "$url_a/v2/models/trees/infer" > /dev/null
curl -sf -d @"$work/body.json" "$url_b/v2/models/trees/infer" > /dev/null

rate() { wrk -t2 -c64 -d"${seconds}s" "$@" | awk '/Requests\/sec/ {print $2}'; }
results=()
for _ in $(seq "$rounds"); do
  for side in a b; do
    url_var="url_$side"
    health=$(rate "${!url_var}/v2/health/live")
    infer=$(rate -s "$work/post.lua" "${!url_var}/v2/models/trees/infer")
    results+=("$side $health $infer")
  done
done
printf '%s\n' "${results[@]}" > "$work/results"
/usr/bin/python3 - "$work/results" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
a = [(float(h), float(i)) for side, h, i in rows if side == "a"]
b = [(float(h), float(i)) for side, h, i in rows if side == "b"]
for k, name in ((0, "/v2/health/live"), (1, "v2 JSON infer, 1 row")):
    ma, mb = statistics.median(x[k] for x in a), statistics.median(x[k] for x in b)
    ratios = [y[k] / x[k] for x, y in zip(a, b)]
    runs_a = ", ".join(f"{x[k]:.0f}" for x in a)
    runs_b = ", ".join(f"{x[k]:.0f}" for x in b)
    print(f"{name:22s} A {ma:9.0f} req/s   B {mb:9.0f} req/s   B/A {statistics.median(ratios):.3f}"
          f"   (per-round B/A {min(ratios):.2f}..{max(ratios):.2f})")
    print(f"{'':22s} runs A: {runs_a}; B: {runs_b}")
PY
