#!/usr/bin/env bash
# Command 2 of the README: install what Slipway needs, build it (warnings are errors), and run
# every test: the release build, then the ASan+UBSan build.
# SLIPWAY_SKIP_INSTALL=1 skips the package step (when it has just run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "${SLIPWAY_SKIP_INSTALL:-0}" = 1 ] || scripts/install-deps.sh
for preset in release debug-asan; do
  echo "== build and test: $preset"
  cmake --preset "$preset"
  cmake --build --preset "$preset"
  ctest --preset "$preset"
done
