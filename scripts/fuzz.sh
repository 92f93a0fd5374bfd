#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan+UBSan) and fuzzes each for SECONDS (default 60),
# starting from the seed corpus in tests/fuzz/corpus/. Crashes land in build/fuzz/crashes/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
cd "$root"
CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSLIPWAY_BUILD_FUZZ=ON -DSLIPWAY_SANITIZE=ON -DSLIPWAY_BUILD_BENCH=OFF
cmake --build build/fuzz --target csv bundle v2_infer
mkdir -p build/fuzz/crashes
for target in csv bundle v2_infer; do
  work=build/fuzz/corpus-$target
  mkdir -p "$work"
  echo "== fuzzing $target for ${seconds}s"
  "build/fuzz/tests/fuzz/$target" -max_total_time="$seconds" -artifact_prefix=build/fuzz/crashes/"$target"- \
    "$work" "tests/fuzz/corpus/$target"
done
