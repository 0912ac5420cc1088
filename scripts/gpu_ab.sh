#!/usr/bin/env bash
# A/B of two builds on the GPU machine in one call: the candidate's GPU tests, then mkbench on
# both for each spec, interleaved so that both see the same clocks. Usage:
#   scripts/gpu_ab.sh BASE_BIN CAND_BIN [LOG]
# Each BIN holds mkplan and mkbench (and, for the candidate, mk_gpu_tests); build them here with
# scripts/gpu_build.sh and copy the base's aside first. SPECS lists "model context" pairs
# (default: the benchmark's four rows); TESTS=0 skips the tests; TRACE=1 also writes the
# candidate's trace summary per spec. Prints one line per build and spec.
set -uo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?base binaries folder}
CAND=${2:?candidate binaries folder}
LOG=${3:-${OUT:-out/ab}}
mkdir -p "$LOG" /tmp/mk-ab/base /tmp/mk-ab/cand
export MK_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
echo "base: $(cat "$BASE/COMMIT" 2>/dev/null || echo "$BASE"), candidate: $(cat "$CAND/COMMIT" 2>/dev/null || echo "$CAND")"
if [ "${TESTS:-1}" != 0 ]; then
  timeout 200 "$CAND/mk_gpu_tests" > "$LOG/gpu_tests.txt" 2>&1
  grep -E "ERROR|FAILED|test cases|assertions" "$LOG/gpu_tests.txt" | head -20
fi
IFS=';' read -ra specs <<< "${SPECS:-llama-3.2-1b 512;llama-3.2-1b 32;llama-3.1-8b 512;qwen3-4b 8192}"
for spec in "${specs[@]}"; do
  set -- $spec
  for v in base cand; do
    bin=$BASE; [ $v = cand ] && bin=$CAND
    [ -f "/tmp/mk-ab/$v/$1.bin" ] || "$bin/mkplan" "examples/$1.yaml" -o "/tmp/mk-ab/$v/$1.bin" --sms 132 -q
    echo "$v $1 @$2: $(timeout 90 "$bin/mkbench" "/tmp/mk-ab/$v/$1.bin" --context "$2" --reps 30 2>&1 |
      grep -E "step \(|without|back to back" | tr -s ' ' | tr '\n' ' ')"
  done
  if [ "${TRACE:-0}" = 1 ]; then
    timeout 90 "$CAND/mkbench" "/tmp/mk-ab/cand/$1.bin" --context "$2" --trace "$LOG/trace-$1-$2" > "$LOG/trace-$1-$2.txt" 2>&1
    grep -A10 "per op name" "$LOG/trace-$1-$2.txt" | tail -9
    rm -f "$LOG/trace-$1-$2.svg"
  fi
done
