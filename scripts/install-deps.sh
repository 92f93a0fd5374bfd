#!/usr/bin/env bash
# The one list of Debian packages Slipway needs to build, test and benchmark.
# Safe to run twice: apt-get install skips what is already there.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config ccache git clang-format clang-tidy
  # libraries (see DESIGN.md, "Dependencies")
  libboost-dev libsimdjson-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
  libsqlite3-dev sqlite3 libssl-dev libfast-float-dev libonnx-dev libprotobuf-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev curl wrk prometheus
  # reference peers for parity tests (they install for /usr/bin/python3)
  python3 python3-numpy python3-pandas python3-sklearn python3-xgboost python3-onnx
  python3-torch
  # Node.js: the npm peers (llama.cpp, ONNX Runtime, the openai client) and the OpenAPI validator
  nodejs
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${packages[@]}"
# npm comes with some Node.js builds (NodeSource's); Debian's is a package of its own.
if ! command -v npm > /dev/null; then
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends npm
fi
