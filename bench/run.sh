#!/usr/bin/env bash
# Runs the benchmarks and their peers in one go and prints ratios (docs/benchmarks.md records them).
# Usage: bench/run.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "training the XGBoost peer model for the tree benchmarks (about a minute)..." >&2
/usr/bin/python3 "$root/bench/tree_peer.py" "$out" > "$out/tree_peer.json"
SLIPWAY_TREE_BENCH_DIR="$out" "$build/bench/slipway_bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_format=json --benchmark_out="$out/ours.json" --benchmark_out_format=json > /dev/null
# The tree kernels not picked by default (AVX2 is, where present), for the record: the scalar
# pointer walk shows what the vector kernels bring.
for kernel in scalar avx512; do
  SLIPWAY_TREE_KERNEL=$kernel SLIPWAY_TREE_BENCH_DIR="$out" "$build/bench/slipway_bench" --benchmark_filter='BM_TreeBatch100k/[12]/0' \
    --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_format=json \
    --benchmark_out="$out/kernel_$kernel.json" --benchmark_out_format=json > /dev/null
done
/usr/bin/python3 "$root/bench/peer_sklearn_predict.py" "$root/data/lending_club.csv" > "$out/peer.json"
/usr/bin/python3 - "$out/ours.json" "$out/peer.json" "$out/tree_peer.json" "$out/kernel_scalar.json" "$out/kernel_avx512.json" <<'PY'
import json, sys
ours = {b["run_name"]: b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("aggregate_name") == "median"}
peer = json.loads(open(sys.argv[2]).read())
trees = json.loads(open(sys.argv[3]).read())
def mbps(name): return ours[name]["bytes_per_second"] / 1e6
def ns(name):
    b = ours[name]; scale = {"ns": 1, "us": 1e3, "ms": 1e6}[b["time_unit"]]
    return b["real_time"] * scale
print("CSV parse (median of 5)")
for data in ("Lending", "Synthetic"):
    scan = mbps(f"BM_NewlineScan_{data}")
    for threads in ("1Thread", "2Threads"):
        name = f"BM_CsvParse_{data}_{threads}"
        name = name if name in ours else name + "/real_time"
        if name in ours:
            print(f"  {data:9s} {threads:8s} {mbps(name):8.1f} MB/s   newline-scan limit {scan:8.1f} MB/s   ratio {mbps(name)/scan:.3f}")
pandas = peer["pandas_read_csv_lending_mb_per_s"]
print(f"  lending_club.csv, 1 thread: slipway {mbps('BM_CsvParse_Lending_1Thread'):.1f} MB/s, pandas.read_csv {pandas:.1f} MB/s, ratio {mbps('BM_CsvParse_Lending_1Thread')/pandas:.2f}")
print("Single-row predict, lending-club logistic regression (median)")
table = ns("BM_PredictOneRow_FromTable"); pre = ns("BM_PredictOneRow_Preprocessed")
print(f"  slipway bundle (preprocess + model)  {table/1e3:8.2f} us   scikit-learn pipeline    {peer['pipeline_one_row_ns']/1e3:8.2f} us   speed-up {peer['pipeline_one_row_ns']/table:6.1f}x")
print(f"  slipway model only (preprocessed)    {pre/1e3:8.2f} us   scikit-learn classifier  {peer['classifier_one_row_ns']/1e3:8.2f} us   speed-up {peer['classifier_one_row_ns']/pre:6.1f}x")
print("Tree ensemble, XGBoost model imported (200 trees, depth 8, 28 features, 5% missing), predictions checked equal (median)")
# BM_TreeBatch100k/THREADS/LAYOUT and the single-row /LAYOUT: 0 the float layout, 1 the quantized one.
for layout, label in ((0, ""), (1, ", quantized layout")):
    for threads in (1, 2):
        rate = ours[f"BM_TreeBatch100k/{threads}/{layout}/real_time"]["rows_per_s"]
        xgb = trees[f"batch_rows_per_s_{threads}t"]
        print(f"  batch 100k rows, {threads} thread(s){label}: slipway {rate/1e3:8.1f}k rows/s   xgboost inplace_predict {xgb/1e3:8.1f}k rows/s   ratio {rate/xgb:5.2f}x")
for path, kernel in ((sys.argv[4], "scalar (pointer walk)"), (sys.argv[5], "avx512")):
    forced = {b["run_name"]: b for b in json.load(open(path))["benchmarks"] if b.get("aggregate_name") == "median"}
    for threads in (1, 2):
        rate = forced[f"BM_TreeBatch100k/{threads}/0/real_time"]["rows_per_s"]
        print(f"  batch 100k rows, {threads} thread(s), {kernel} kernel forced: slipway {rate/1e3:8.1f}k rows/s   ratio {rate/trees[f'batch_rows_per_s_{threads}t']:5.2f}x")
runs = json.load(open(sys.argv[1]))["benchmarks"]
for layout, label in ((0, ""), (1, ", quantized layout")):
    single = ns(f"BM_TreeSingleRow/{layout}")
    percentiles = [b for b in runs if b["run_name"].startswith(f"BM_TreeSingleRowPercentiles/{layout}/") and b.get("aggregate_name") == "median"][0]
    print(f"  single row{label}: slipway {single/1e3:.2f} us mean, {percentiles['p50_us']:.2f} us median, {percentiles['p99_us']:.2f} us p99"
          f"   xgboost inplace_predict {trees['single_row_median_us']:.1f} us median (p99 {trees['single_row_p99_us']:.1f} us)")
PY
