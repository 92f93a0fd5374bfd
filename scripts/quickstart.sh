#!/usr/bin/env bash
# Command 1 of the README: install what Slipway needs, build it, and run the demo end to end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install-deps.sh
cmake --preset release
cmake --build --preset release
scripts/demo.sh build/release
