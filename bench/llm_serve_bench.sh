#!/usr/bin/env bash
# Serving throughput and latency of `slipway llm serve`, measured by `slipway llm bench-serve`
# (vLLM's benchmark_serving method: streamed /v1/completions, token-id prompts, ignore_eos so every
# output is exactly its length), in one run against:
#   (a) slipway with continuous batching (--max-num-seqs = CLIENTS),
#   (b) slipway one request at a time (--max-num-seqs 1),
#   (c) llama.cpp serving CLIENTS sequences from one context (bench/llm_serve_peer.mjs, through
#       node-llama-cpp 3.21.1's prebuilt CPU library, batching the sequences' evaluations),
# with the same client settings, then
#   (d) prefix caching: a long system prompt shared by every request, short own prompts and
#       outputs, slipway as it runs by default against --no-prefix-caching (TTFT p50 ratio);
#   (e) speculative decoding, greedy, one client: the F16 file of the same shape plain, with
#       --speculative ngram, and with --speculative draft and the Q8_0 file as its draft (decode
#       tokens/s ratios and the acceptance rate from /metrics);
#   (f) KV-cache capacity: the same --kv-cache-mb with f32, f16 (the default), int8 and FP8 E4M3
#       keys and values, 32 clients of long requests, the most sequences running at once (polled from
#       /metrics) and preemptions.
# Each server starts on a free port, is waited for, warmed up with two short requests, measured,
# and stopped. Every measurement is checked: all requests completed, with exactly the output
# tokens asked for; a row that fails the check says so.
#
# Usage: bench/llm_serve_bench.sh BUILD_DIR [MODEL.gguf]
# Default model: $SLIPWAY_BENCH_MODELS/110m_q8_0.gguf (~/.cache/slipway-bench-models), the random-weight
# 110M Llama bench/llm_peer.sh uses, written on first use. Environment (defaults in brackets):
#   CLIENTS [16]  REQUESTS [64]  PROMPT_TOKENS [128]  OUTPUT_TOKENS [128]  RATE [0: all at once]
#   VOCAB [32000: prompts draw ids below it]  THREADS [all cores, for every server]
#   PREFIX_TOKENS [1024, cut to what the context holds]  PREFIX_OWN_TOKENS [32]  PREFIX_OUTPUT_TOKENS [16]
#   PREFIX_REQUESTS [REQUESTS]  SKIP [letters of the parts to leave out, e.g. "bd"]
#   SPEC_TARGET [the 110M F16 file]  SPEC_DRAFT [the 110M Q8_0 file]  SPEC_REQUESTS [4]
#   KV_MB [300]  KV_CLIENTS [32]
# About 10-15 minutes on 2 cores with the defaults; REQUESTS=8 OUTPUT_TOKENS=16 checks it in about one.
set -euo pipefail
build=${1:?usage: bench/llm_serve_bench.sh BUILD_DIR [MODEL.gguf]}
slipway="$build/slipway"
here=$(cd "$(dirname "$0")" && pwd)
models=${SLIPWAY_BENCH_MODELS:-$HOME/.cache/slipway-bench-models}
peers="$HOME/.cache/slipway-peers-llama"
clients=${CLIENTS:-16}
requests=${REQUESTS:-64}
prompt_tokens=${PROMPT_TOKENS:-128}
output_tokens=${OUTPUT_TOKENS:-128}
rate=${RATE:-0}
vocab=${VOCAB:-32000}
threads=${THREADS:-$(nproc)}
prefix_tokens=${PREFIX_TOKENS:-1024}
prefix_own=${PREFIX_OWN_TOKENS:-32}
prefix_output=${PREFIX_OUTPUT_TOKENS:-16}
prefix_requests=${PREFIX_REQUESTS:-$requests}
skip=${SKIP:-}

if [[ -n ${2:-} ]]; then
  model=$2
else
  model="$models/110m_q8_0.gguf"
  if [[ ! -f $model ]]; then
    mkdir -p "$models"
    "$slipway" llm make-test-model "$model" --type q8_0 --layers 12 --dim 768 --heads 12 --kv-heads 12 --ff 2048 \
      --vocab 32000 --context 1024 >&2
  fi
fi
name=$(basename "$model" .gguf)
if [[ $skip != *c* && ! -f "$peers/node_modules/node-llama-cpp/dist/index.js" ]]; then
  timeout 180 npm install --prefix "$peers" -E --omit=optional --no-audit --no-fund \
    node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 >/dev/null
fi

work=$(mktemp -d /tmp/llm_serve_bench.XXXXXX)
server_pid=""
stop_server() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=""
}
trap 'stop_server; rm -rf "$work"' EXIT

# wait_for_port FILE PATTERN: the port once FILE has a line matching PATTERN (sed -E, the port in \1).
wait_for_port() {
  local port=""
  for _ in $(seq 1200); do
    port=$(sed -nE "s/$2/\\1/p" "$1" 2>/dev/null | head -1)
    [[ -n $port ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "$port"
}
# start_slipway LABEL [SERVE FLAGS...]: sets $port (empty when the server did not start).
start_slipway() {
  stop_server
  "$slipway" --json llm serve "$model" --port 0 --threads "$threads" "${@:2}" >"$work/$1.out" 2>"$work/$1.log" &
  server_pid=$!
  port=$(wait_for_port "$work/$1.out" '.*"port":([0-9]+).*')
}
start_peer() {  # LABEL SEQUENCES CONTEXT
  stop_server
  node "$here/llm_serve_peer.mjs" "$peers/node_modules" "$model" 0 "$2" "$3" "$threads" \
    >"$work/$1.out" 2>"$work/$1.log" &
  server_pid=$!
  port=$(wait_for_port "$work/$1.out" '^listening ([0-9]+)$')
}
# poll_metrics LABEL: while the server runs, the largest running count and the last metrics text.
poll_metrics() {
  local most=0 running
  while kill -0 "$server_pid" 2>/dev/null; do
    curl -s "http://127.0.0.1:$port/metrics" >"$work/$1.metrics.tmp" 2>/dev/null || break
    running=$(sed -nE 's/^slipway_llm_requests_running\{[^}]*\} ([0-9]+)$/\1/p' "$work/$1.metrics.tmp")
    [[ -n $running ]] && ((running > most)) && most=$running
    echo "$most" >"$work/$1.peak"
    mv "$work/$1.metrics.tmp" "$work/$1.metrics"
    sleep 0.2
  done
}
# measure LABEL [BENCH-SERVE FLAGS...]: $work/LABEL.json, after a warm-up; empty when no server.
measure() {
  if [[ -z $port ]]; then
    echo "error: the server for $1 did not start:" >&2
    tail -5 "$work/$1.log" >&2
    : >"$work/$1.json"
    stop_server
    return
  fi
  local common=(--url "http://127.0.0.1:$port" --model "$name" --vocab "$vocab" --seed 1)
  "$slipway" --json llm bench-serve "${common[@]}" --clients 2 --requests 2 --prompt-tokens 16 --output-tokens 4 \
    >/dev/null 2>&1 || true
  poll_metrics "$1" &
  local poller=$!
  "$slipway" --json llm bench-serve "${common[@]}" "${@:2}" >"$work/$1.json" 2>>"$work/bench.log" || true
  curl -s "http://127.0.0.1:$port/metrics" >"$work/$1.metrics" 2>/dev/null || true
  stop_server
  wait "$poller" 2>/dev/null || true
}

main=(--clients "$clients" --requests "$requests" --prompt-tokens "$prompt_tokens" --output-tokens "$output_tokens"
      --rate "$rate")
echo "model $model ($name), $threads threads per server; $requests requests from $clients clients, $prompt_tokens" \
     "prompt and $output_tokens output tokens each" >&2
context=""
if [[ $skip != *a* ]]; then
  echo "(a) slipway, --max-num-seqs $clients" >&2
  start_slipway a --max-num-seqs "$clients"
  context=$(sed -nE 's/.*context ([0-9]+) per sequence.*/\1/p' "$work/a.log" | head -1)
  measure a "${main[@]}"
fi
if [[ $skip != *b* ]]; then
  echo "(b) slipway, --max-num-seqs 1" >&2
  start_slipway b --max-num-seqs 1
  measure b "${main[@]}"
fi
if [[ -z $context ]]; then  # the context slipway gives each sequence: the model's, at most 4096
  start_slipway probe --max-num-seqs 1
  context=$(sed -nE 's/.*context ([0-9]+) per sequence.*/\1/p' "$work/probe.log" | head -1)
  stop_server
fi
context=${context:-1024}
if [[ $skip != *c* ]]; then
  echo "(c) llama.cpp (node-llama-cpp), $clients sequences of $context tokens in one context" >&2
  start_peer c "$clients" "$context"
  measure c "${main[@]}"
fi
if [[ $skip != *d* ]]; then
  longest=$((context - prefix_own - prefix_output))
  if ((prefix_tokens > longest)); then
    echo "note: the shared prefix is cut from $prefix_tokens to $longest tokens, what a context of $context holds" \
         "with $prefix_own own and $prefix_output output tokens" >&2
    prefix_tokens=$longest
  fi
  prefix=(--clients "$clients" --requests "$prefix_requests" --system-prompt-tokens "$prefix_tokens"
          --prompt-tokens "$prefix_own" --output-tokens "$prefix_output" --rate "$rate")
  echo "(d) prefix caching: $prefix_tokens shared + $prefix_own own prompt tokens, $prefix_output output" >&2
  start_slipway d_cached --max-num-seqs "$clients"
  measure d_cached "${prefix[@]}"
  start_slipway d_uncached --max-num-seqs "$clients" --no-prefix-caching
  measure d_uncached "${prefix[@]}"
fi
if [[ $skip != *e* ]]; then
  spec_target=${SPEC_TARGET:-$models/110m_f16.gguf}
  spec_draft=${SPEC_DRAFT:-$models/110m_q8_0.gguf}
  if [[ ! -f $spec_target ]]; then
    "$slipway" llm make-test-model "$spec_target" --type f16 --layers 12 --dim 768 --heads 12 --kv-heads 12 \
      --ff 2048 --vocab 32000 --context 1024 >&2
  fi
  spec=(--clients 1 --requests "${SPEC_REQUESTS:-4}" --prompt-tokens 64 --output-tokens 256)
  saved_model=$model saved_name=$name
  model=$spec_target name=$(basename "$spec_target" .gguf)
  echo "(e) speculative decoding on $name, greedy, one client" >&2
  start_slipway e_plain
  measure e_plain "${spec[@]}"
  start_slipway e_ngram --speculative ngram
  measure e_ngram "${spec[@]}"
  start_slipway e_draft --speculative draft --draft-model "$spec_draft"
  measure e_draft "${spec[@]}"
  model=$saved_model name=$saved_name
fi
if [[ $skip != *f* ]]; then
  kv=(--clients "${KV_CLIENTS:-32}" --requests "${KV_CLIENTS:-32}" --prompt-tokens 512 --output-tokens 128)
  echo "(f) KV cache capacity in ${KV_MB:-300} MiB: f32, f16, int8 and fp8_e4m3" >&2
  for dtype in f32 f16 int8 fp8_e4m3; do
    start_slipway "f_$dtype" --max-num-seqs "${KV_CLIENTS:-32}" --kv-cache-mb "${KV_MB:-300}" --no-prefix-caching \
      --kv-cache-dtype "$dtype"
    measure "f_$dtype" "${kv[@]}"
  done
fi

/usr/bin/python3 - "$work" "$requests" "$output_tokens" "$prefix_requests" "$prefix_output" "$clients" <<'PY'
import json, os, sys
work, requests, output, prefix_requests, prefix_output, clients = sys.argv[1], *map(int, sys.argv[2:])

def load(label):
    path = os.path.join(work, label + ".json")
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    return json.load(open(path))

def check(report, count, tokens):
    """'' when every request completed with exactly its tokens, else what went wrong."""
    if report is None:
        return "no server"
    problems = []
    if report["failed"]:
        reasons = "; ".join(f'{f["count"]}x {f["reason"]}' for f in report["failures"])
        problems.append(f'{report["failed"]} failed ({reasons})')
    if report["total_output_tokens"] != count * tokens:
        problems.append(f'{report["total_output_tokens"]} output tokens, not {count * tokens}')
    return ", ".join(problems)

def ms(value):
    return "-" if value is None else f"{value:.1f}"

rows = [("a", f"slipway, continuous batching (--max-num-seqs {clients})"),
        ("b", "slipway, one at a time (--max-num-seqs 1)"),
        ("c", f"llama.cpp via node-llama-cpp, {clients} sequences in one context")]
reports = {label: load(label) for label, _ in rows}
print("| server | completed | output tokens/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | TPOT mean ms | check |")
print("|---|---|---|---|---|---|---|")
for label, title in rows:
    report = reports[label]
    if report is None and not os.path.exists(os.path.join(work, label + ".json")):
        continue  # skipped
    if report is None:
        print(f"| ({label}) {title} | - | - | - | - | - | no server |")
        continue
    problem = check(report, requests, output)
    print(f'| ({label}) {title} | {report["completed"]}/{requests} | {report["output_tokens_per_second"]:.1f} | '
          f'{ms(report["ttft_ms"]["p50"])} / {ms(report["ttft_ms"]["p99"])} | '
          f'{ms(report["itl_ms"]["p50"])} / {ms(report["itl_ms"]["p99"])} | {ms(report["tpot_ms"]["mean"])} | '
          f'{problem or "ok"} |')

def ratio(top, bottom, key):
    a, b = reports.get(top), reports.get(bottom)
    if not a or not b or not b[key]:
        return None
    return a[key] / b[key]

ratios = []
for other, what in (("b", "one at a time"), ("c", "llama.cpp")):
    value = ratio("a", other, "output_tokens_per_second")
    if value is not None:
        ratios.append(f"(a)/({other}) output tokens/s, slipway continuous batching vs {what}: {value:.2f}x")
if ratios:
    print("\n" + "\n".join(ratios))

cached, uncached = load("d_cached"), load("d_uncached")
if cached is not None or uncached is not None:
    print("\n| prefix caching | completed | output tokens/s | TTFT p50 / p99 ms | E2E p50 ms | check |")
    print("|---|---|---|---|---|---|")
    for title, report in (("slipway (prefix caching on)", cached), ("slipway --no-prefix-caching", uncached)):
        if report is None:
            print(f"| {title} | - | - | - | - | no server |")
            continue
        problem = check(report, prefix_requests, prefix_output)
        print(f'| {title} | {report["completed"]}/{prefix_requests} | {report["output_tokens_per_second"]:.1f} | '
              f'{ms(report["ttft_ms"]["p50"])} / {ms(report["ttft_ms"]["p99"])} | {ms(report["e2e_ms"]["p50"])} | '
              f'{problem or "ok"} |')
    if cached and uncached and cached["ttft_ms"]["p50"] and uncached["ttft_ms"]["p50"]:
        settings = cached["settings"]
        print(f'\nTTFT p50 without / with prefix caching ({settings["system_prompt_tokens"]} shared + '
              f'{settings["prompt_tokens"]} own prompt tokens): '
              f'{uncached["ttft_ms"]["p50"] / cached["ttft_ms"]["p50"]:.2f}x')

def metric(label, name):
    path = os.path.join(work, label + ".metrics")
    if not os.path.exists(path):
        return None
    for line in open(path):
        if line.startswith(name + "{"):
            return float(line.split()[-1])
    return None

def peak(label):
    path = os.path.join(work, label + ".peak")
    return int(open(path).read().strip() or 0) if os.path.exists(path) else None

spec = {label: load(label) for label in ("e_plain", "e_ngram", "e_draft")}
if any(spec.values()):
    print("\n| speculative decoding, one client | decode tokens/s | TPOT mean ms | acceptance | vs plain |")
    print("|---|---|---|---|---|")
    plain = spec["e_plain"]
    for label, title in (("e_plain", "plain"), ("e_ngram", "--speculative ngram"),
                         ("e_draft", "--speculative draft (the Q8_0 file drafts)")):
        report = spec[label]
        if report is None:
            continue
        # Decode rate per request: output tokens after the first over the time after it.
        rate = 1000.0 / report["tpot_ms"]["mean"] if report["tpot_ms"]["mean"] else 0
        accepted = metric(label, "slipway_llm_spec_decode_acceptance_ratio")
        versus = plain and plain["tpot_ms"]["mean"] / report["tpot_ms"]["mean"]
        print(f'| {title} | {rate:.1f} | {ms(report["tpot_ms"]["mean"])} | '
              f'{"-" if accepted is None or label == "e_plain" else f"{100 * accepted:.0f}%"} | '
              f'{"-" if not versus else f"{versus:.2f}x"} |')

kv = {label: load(label) for label in ("f_f32", "f_f16", "f_int8", "f_fp8_e4m3")}
if any(kv.values()):
    print("\n| KV cache, same budget | pool blocks | most sequences at once | preemptions | output tokens/s |")
    print("|---|---|---|---|---|")
    for label, title in (("f_f32", "f32"), ("f_f16", "f16 (the default)"), ("f_int8", "int8"),
                         ("f_fp8_e4m3", "fp8_e4m3")):
        report = kv[label]
        if report is None:
            continue
        print(f'| {title} | {metric(label, "slipway_llm_kv_cache_blocks"):.0f} | {peak(label)} | '
              f'{metric(label, "slipway_llm_preemptions_total"):.0f} | {report["output_tokens_per_second"]:.1f} |')
    for eight in ("f_int8", "f_fp8_e4m3"):
        for base in ("f_f16", "f_f32"):
            if peak(base) and peak(eight):
                blocks = metric(eight, "slipway_llm_kv_cache_blocks") / metric(base, "slipway_llm_kv_cache_blocks")
                print(f'\n{eight[2:]} / {base[2:]} sequences at once in the same memory: '
                      f'{peak(eight) / peak(base):.2f}x (pool blocks {blocks:.2f}x)')
PY
