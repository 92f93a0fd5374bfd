#!/usr/bin/env bash
# Style gates CI enforces: clang-format on every C++ file (no diff allowed) and clang-tidy with
# .clang-tidy (warnings are errors) on every source file of the build in BUILD_DIR (default
# build/release, which must have been configured: it provides compile_commands.json): src/, tests/
# and bench/.
# Usage: scripts/lint.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/release}
cd "$root"
mapfile -t files < <(git ls-files '*.cpp' '*.h')
echo "== clang-format: ${#files[@]} files"
clang-format --dry-run --Werror "${files[@]}"
mapfile -t sources < <(git ls-files 'src/*.cpp' 'tests/*.cpp' 'bench/*.cpp')
echo "== clang-tidy: ${#sources[@]} sources in src/, tests/ and bench/ (headers under include/ and src/ through them)"
# A source whose inputs (itself, its headers, its compile command, .clang-tidy) passed before is
# not checked again: scripts/tidy_cached.py keeps the results by content hash.
python3 scripts/tidy_cached.py "$build" "${sources[@]}"
echo "lint: clean"
