#!/usr/bin/env bash
# What large v2 JSON requests cost a server in memory: N concurrent requests of ROWS lending_club
# rows each (one JSON body, about 170 bytes a row) sent with curl to `slipway serve` (a GBDT),
# then the server's peak resident memory (VmHWM in /proc) and the statuses it answered: the
# in-flight budget admits what fits at kV2BodyMemoryFactor times each body and answers the rest
# 503 with Retry-After. Memory, not time, so it runs on a busy machine too.
# Usage: bench/request_memory.sh [BUILD_DIR] [CONCURRENT=6] [ROWS=200000] [SERVE FLAGS...]
# (e.g. --max-request-memory-mb 100000 admits every request: the server as it was without the budget)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
concurrent=${2:-6}
rows=${3:-200000}
shift $(($# < 3 ? $# : 3))
work=$(mktemp -d)
# shellcheck source=bench/serve_helpers.sh
source "$root/bench/serve_helpers.sh"
trap 'stop_server; rm -rf "$work"' EXIT
"$build/slipway" --home "$work/ws" train --data "$root/data/lending_club.csv" --target Class --model gbdt \
  --register lending --no-progress > /dev/null 2>&1
/usr/bin/python3 - "$root/data/lending_club.csv" "$rows" > "$work/body.json" <<'PY'
import csv, json, sys
with open(sys.argv[1]) as f:
    table = list(csv.DictReader(f))
wanted = int(sys.argv[2])
columns = [c for c in table[0] if c != "Class"]
rows = [table[i % len(table)] for i in range(wanted)]
inputs = []
for c in columns:
    values = [r[c] for r in rows]
    try:
        data = [float(v) if v != "" else None for v in values]
        inputs.append({"name": c, "datatype": "FP32", "shape": [wanted], "data": [0.0 if v is None else v for v in data]})
    except ValueError:
        inputs.append({"name": c, "datatype": "BYTES", "shape": [wanted], "data": values})
print(json.dumps({"inputs": inputs}))
PY
start_server "$@"
pid=$server_pid
hwm() { awk '/VmHWM/ {print $2}' "/proc/$pid/status"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$pid/status"; }
curl -s -o /dev/null "$base/v2/models/lending/ready"
before=$(hwm)
body_bytes=$(stat -c %s "$work/body.json")
clients=()
for i in $(seq "$concurrent"); do
  curl -s -o /dev/null -w '%{http_code}\n' -H 'Content-Type: application/json' \
    --data-binary @"$work/body.json" "$base/v2/models/lending/infer" > "$work/status.$i" &
  clients+=($!)
done
wait "${clients[@]}"
after=$(hwm)
statuses=$(cat "$work"/status.* | sort | uniq -c | awk '{printf "%s x %s  ", $1, $2}')
printf '%d concurrent requests of %d rows (%.1f MB each): answered %s\n' "$concurrent" "$rows" \
  "$(echo "$body_bytes / 1000000" | bc -l)" "$statuses"
printf 'server peak resident memory: %.0f MB before, %.0f MB after (+%.0f MB, %.1f x one body); resident now %.0f MB\n' \
  "$(echo "$before / 1024" | bc -l)" "$(echo "$after / 1024" | bc -l)" "$(echo "($after - $before) / 1024" | bc -l)" \
  "$(echo "($after - $before) * 1024 / $body_bytes" | bc -l)" "$(echo "$(rss) / 1024" | bc -l)"
