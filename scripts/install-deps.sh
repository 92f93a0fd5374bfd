#!/usr/bin/env bash
# The Debian packages Slipway needs. With no argument: everything, to build, test, lint and
# benchmark (scripts/test.sh). With --product: only what building Slipway and running the demo need
# (scripts/quickstart.sh), without the test peers (PyTorch, scikit-learn, XGBoost, Node.js,
# Prometheus, wrk) that are most of the download.
# Safe to run twice: apt-get install skips what is already there.
set -euo pipefail

product=(
  # toolchain
  build-essential cmake ninja-build pkg-config ccache git
  # libraries (see DESIGN.md, "Dependencies")
  libboost-dev libsimdjson-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
  libsqlite3-dev sqlite3 libssl-dev libfast-float-dev libonnx-dev libprotobuf-dev
  # the demo's client, and the tour's (README): its tracking example is Python
  curl python3
)
tests=(
  # the style gates
  clang-format clang-tidy
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev wrk prometheus
  # reference peers for parity tests (they install for /usr/bin/python3)
  python3 python3-numpy python3-pandas python3-sklearn python3-xgboost python3-onnx
  python3-torch python3-optuna
  # Node.js: the npm peers (llama.cpp, ONNX Runtime, the openai client) and the OpenAPI validator
  nodejs
)

case "${1:-}" in
  --product) packages=("${product[@]}") ;;
  "") packages=("${product[@]}" "${tests[@]}") ;;
  *) echo "usage: $0 [--product]" >&2; exit 2 ;;
esac

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${packages[@]}"
# npm comes with some Node.js builds (NodeSource's); Debian's is a package of its own.
if [ "${1:-}" != --product ] && ! command -v npm > /dev/null; then
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends npm
fi
