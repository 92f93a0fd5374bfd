# Shared by the serving benchmarks: start `slipway serve` on a free port and stop it on exit.
# Expects $build (the build folder) and $work (a scratch folder); sets $server_pid and $base.
server_pid=""
stop_server() {
  if [[ -n $server_pid ]]; then kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=""
}
# start_server [SERVE FLAGS...]: (re)starts the server on the workspace $work/ws.
start_server() {
  stop_server
  rm -f "$work/serve.out"
  "$build/slipway" --home "$work/ws" serve --port 0 "$@" > "$work/serve.out" 2> "$work/serve.log" &
  server_pid=$!
  for _ in $(seq 100); do grep -q 'serving on' "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
  base="http://127.0.0.1:$(grep -o '127.0.0.1:[0-9]*' "$work/serve.out" | head -1 | cut -d: -f2)"
}
