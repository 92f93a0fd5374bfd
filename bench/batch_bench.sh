#!/usr/bin/env bash
# Batch scoring throughput against two references, in one run: the XGBoost model of tree_peer.py
# (200 trees of depth 8, 28 features, 5% missing) imported, 100,000 rows as CSV. `slipway batch`
# end to end (reading the CSV, checking rows, scoring, writing parts and manifest, 2 workers) is
# compared with the in-process predict limit of the same bundle on the same rows already in
# memory (tree_bench's BM_TreeBatch100k, 2 threads) and with XGBoost's inplace_predict on a numpy
# array (2 threads). Medians of ROUNDS runs of the batch.
# Usage: bench/batch_bench.sh [BUILD_DIR] [ROUNDS]   (build/release, 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
rounds=${2:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
slipway() { "$build/slipway" --home "$work/ws" "$@"; }

echo "training the XGBoost peer model (about a minute)..." >&2
/usr/bin/python3 "$root/bench/tree_peer.py" "$work" > "$work/peer.json"
/usr/bin/python3 - "$work" <<'PY'
import sys
import numpy as np
work = sys.argv[1]
rows = np.fromfile(f"{work}/rows.f32", dtype="<f4").reshape(-1, 28)
with open(f"{work}/rows.csv", "w") as out:
    out.write(",".join(f"f{i}" for i in range(28)) + "\n")
    for row in rows:
        out.write(",".join("" if np.isnan(v) else repr(float(v)) for v in row) + "\n")
PY
slipway -q import xgboost "$work/model.json" --schema "$work/rows.csv" --register trees > /dev/null
for round in $(seq "$rounds"); do
  start=$(date +%s.%N)
  slipway -q batch trees@1 --data "$work/rows.csv" --out "$work/out.$round" --shards 8 --workers 2 --no-progress > /dev/null
  end=$(date +%s.%N)
  echo "$start $end" >> "$work/batch_times"
done
SLIPWAY_TREE_BENCH_DIR="$work" "$build/bench/slipway_bench" --benchmark_filter='BM_TreeBatch100k/2/0' \
  --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_format=json \
  --benchmark_out="$work/limit.json" --benchmark_out_format=json > /dev/null
/usr/bin/python3 - "$work" <<'PY'
import json, statistics, sys
work = sys.argv[1]
peer = json.load(open(f"{work}/peer.json"))
rows = peer["rows"]
seconds = [float(end) - float(start) for start, end in (line.split() for line in open(f"{work}/batch_times"))]
batch = rows / statistics.median(seconds)
limit = [b for b in json.load(open(f"{work}/limit.json"))["benchmarks"] if b.get("aggregate_name") == "median"][0]["rows_per_s"]
xgb = peer["batch_rows_per_s_2t"]
scored = sum(1 for _ in open(f"{work}/out.1/part-00000.csv")) - 1
print(f"batch scoring, {rows:,} rows x 28 features, 200 trees of depth 8, 2 workers (median of {len(seconds)} runs)")
print(f"  slipway batch (CSV in, CSV parts out)    {batch/1e3:8.1f}k rows/s")
print(f"  in-process predict limit (same bundle)   {limit/1e3:8.1f}k rows/s   batch / limit {batch/limit:.3f}")
print(f"  xgboost inplace_predict (numpy array)    {xgb/1e3:8.1f}k rows/s   batch / xgboost {batch/xgb:.3f}")
print(f"  (shard 0 wrote {scored:,} rows)")
PY
