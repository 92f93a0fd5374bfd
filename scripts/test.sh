#!/usr/bin/env bash
# Command 2 of the README: install what Slipway needs, build it (warnings are errors), and run
# the tests: every test in the release build, then under ASan+UBSan every test but the ones
# labelled `slow` (soak and load tests: minutes of traffic that a sanitizer slows tenfold and that
# check throughput, not memory safety; the code they drive runs under ASan in the fast ones).
# `ctest --preset debug-asan` runs the slow ones under ASan too.
# SLIPWAY_SKIP_INSTALL=1 skips the package step (when it has just run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "${SLIPWAY_SKIP_INSTALL:-0}" = 1 ] || scripts/install-deps.sh
for preset in release debug-asan; do
  echo "== build and test: $preset"
  cmake --preset "$preset"
  cmake --build --preset "$preset"
  if [ "$preset" = debug-asan ]; then
    ctest --preset "$preset" --label-exclude slow
  else
    ctest --preset "$preset"
  fi
done
