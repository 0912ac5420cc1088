#!/usr/bin/env bash
# The whole test suite, what CI runs (on a clean clone without a GPU); warnings are errors:
#   1. the release build (scripts/setup.sh: installs what is missing, builds build/), its tests;
#   2. the same tests under AddressSanitizer + UndefinedBehaviorSanitizer (preset asan-ubsan,
#      build-asan-ubsan/);
#   3. each fuzz harness on a short fixed number of inputs (preset fuzz: clang + libFuzzer,
#      build-fuzz/). The long run is scripts/fuzz.sh.
# MK_CUDA=OFF leaves the CUDA interpreter out of step 1 (the others never build it).
set -euo pipefail
cd "$(dirname "$0")"
export MK_WERROR=${MK_WERROR:-ON} MK_TEST_DEPS=1
jobs=$(nproc)
scripts/setup.sh
ctest --test-dir build --output-on-failure
cmake --preset asan-ubsan >/dev/null
cmake --build --preset asan-ubsan -j"$jobs"
ctest --preset asan-ubsan
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j"$jobs" --target fuzzers
ctest --preset fuzz
