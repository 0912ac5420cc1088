#!/usr/bin/env bash
# The whole test suite, what CI runs (.ci/run, on a clean clone without a GPU); warnings are errors:
#   1. the release build (scripts/setup.sh: installs what is missing, builds every target in
#      build/, with the flags demo.sh uses: each reuses what the other built), its tests. Where
#      nvcc is found this compiles the CUDA interpreter and the CUDA-only binaries mk_gpu_tests
#      and mkbench too; those run on a GPU (scripts/gpu_check.sh), never here; and checks the
#      interpreter's register spills against scripts/spill_budget.txt (scripts/check_spills.py);
#   2. the same tests under AddressSanitizer + UndefinedBehaviorSanitizer (preset asan-ubsan,
#      build-asan-ubsan/);
#   3. each fuzz harness on a short fixed number of inputs (preset fuzz: clang + libFuzzer,
#      build-fuzz/). The long run is scripts/fuzz.sh.
# Each ctest runs its tests side by side (-j, one a core: the unit tests and each CLI script take
# one core and their own temporary folders).
# MK_CUDA=OFF leaves the CUDA interpreter out of step 1 (the others never build it); without nvcc
# step 1 is CPU only and says so. The CPU tests are the same either way.
set -euo pipefail
cd "$(dirname "$0")"
export MK_TEST_DEPS=1
jobs=$(nproc)
scripts/setup.sh
if grep -q '^MK_CUDA:BOOL=ON$' build/CMakeCache.txt; then
  cuda="compiled (mk_cuda, mk_gpu_tests, mkbench; the GPU tests are not run here)"
else
  cuda="NOT compiled (CPU only)"
fi
ctest --test-dir build --output-on-failure -j"$jobs"
# Where the CUDA interpreter is compiled: its register spills within scripts/spill_budget.txt.
if grep -q '^MK_CUDA:BOOL=ON$' build/CMakeCache.txt; then python3 scripts/check_spills.py build; fi
cmake --preset asan-ubsan >/dev/null
cmake --build --preset asan-ubsan -j"$jobs"
ctest --preset asan-ubsan -j"$jobs"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j"$jobs" --target fuzzers
ctest --preset fuzz -j"$jobs"
echo "test.sh: passed: release, asan-ubsan, fuzz; the CUDA interpreter: $cuda"
