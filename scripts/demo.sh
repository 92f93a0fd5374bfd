#!/usr/bin/env bash
# The main demo, on the embedded defaults (SQLite, local artifact folder, in-process server):
# train a logistic regression on lending_club.csv, register it, serve it, send a KServe v2
# request, print the prediction, and stop the server.
# Usage: scripts/demo.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
slipway=$build/slipway
[ -x "$slipway" ] || { echo "demo: $slipway not found; build first (scripts/quickstart.sh)" >&2; exit 1; }

home=$(mktemp -d /tmp/slipway-demo.XXXXXX)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill -TERM "$server_pid"; wait "$server_pid" || true; fi
  rm -rf "$home"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "slipway init"
"$slipway" --home "$home" init

step "slipway train: logistic regression on lending_club.csv, stratified split, metrics per addr_state"
"$slipway" --home "$home" train --data "$root/data/lending_club.csv" --target Class \
  --split stratified --slice addr_state --register lending

step "slipway versions lending"
"$slipway" --home "$home" versions lending

step "slipway serve --port 0 (a free port)"
"$slipway" --home "$home" --quiet serve --port 0 > "$home/serve.out" &
server_pid=$!
port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's|.*http://127.0.0.1:\([0-9]*\).*|\1|p' "$home/serve.out" | head -n 1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "demo: the server did not start" >&2; exit 1; }
cat "$home/serve.out"
curl -fsS "http://127.0.0.1:$port/v2/health/ready"; echo
curl -fsS "http://127.0.0.1:$port/v2/models/lending/ready"; echo

step "POST /v2/models/lending/infer (two loan applications, one with a missing revol_util)"
response=$(curl -fsS -X POST -H 'Content-Type: application/json' \
  --data @"$root/examples/lending_request.json" "http://127.0.0.1:$port/v2/models/lending/infer")
echo "$response"

step "stopping the server"
kill -TERM "$server_pid"
wait "$server_pid"
server_pid=""
echo "server stopped cleanly"
