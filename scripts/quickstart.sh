#!/usr/bin/env bash
# Command 1 of the README: install what Slipway needs (not the test peers: scripts/test.sh adds
# them), build the product alone (no tests, no benchmarks), and run the demo end to end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh --product
cmake --preset product
cmake --build --preset product
scripts/demo.sh build/product
