#!/usr/bin/env bash
# A/B of builds on the GPU machine in one call: each candidate's GPU tests, then mkbench on
# every build for each spec, interleaved so that all see the same clocks. Usage:
#   scripts/gpu_ab.sh BASE_BIN CAND_BIN [CAND_BIN ...]
# Each BIN holds mkplan and mkbench (and, for a candidate, mk_gpu_tests); build them here with
# scripts/gpu_build.sh and copy each aside. A BIN with an examples/ folder plans from its YAML
# files (a base whose planner predates a change to the examples). Logs go to $LOG (default $OUT, else out/ab). SPECS
# lists "model context" pairs (default: the benchmark's four rows); TESTS=0 skips the tests;
# TRACE=1 also writes each candidate's trace summary per spec (TRACE_BASE=0: the base's too).
# A BIN may end in :ARGS, extra mkbench arguments for that build (the same binaries under
# another setting, without its tests: "out/exp/c1:--stages 8"). Prints one line per build and
# spec, also to $LOG/gpu_ab.log.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 BASE_BIN CAND_BIN [CAND_BIN ...]" >&2; exit 2; }
bins=() args=()
for b in "$@"; do bins+=("${b%%:*}"); [[ $b == *:* ]] && args+=("${b#*:}") || args+=(""); done
LOG=${LOG:-${OUT:-out/ab}}
mkdir -p "$LOG"
rm -rf /tmp/mk-ab  # plans are made by each build's own mkplan, afresh in every call
exec > >(tee "$LOG/gpu_ab.log") 2>&1  # what it prints also comes back as a file
export MK_SOURCE_DIR=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
name() { echo "$(basename "$1") ($(cat "$1/COMMIT" 2>/dev/null || echo "no COMMIT"))${2:+ with $2}"; }
for ((v = 0; v < ${#bins[@]}; ++v)); do
  echo "build $v: $(name "${bins[v]}" "${args[v]}")$([ $v = 0 ] && echo ", the base")"
  mkdir -p "/tmp/mk-ab/$v"
  if [ $v -gt 0 ] && [ "${TESTS:-1}" != 0 ] && [ -z "${args[v]}" ]; then
    timeout 260 "${bins[v]}/mk_gpu_tests" > "$LOG/gpu_tests-$v.txt" 2>&1
    grep -E "ERROR|FAILED|test cases|assertions" "$LOG/gpu_tests-$v.txt" | head -20
  fi
done
IFS=';' read -ra specs <<< "${SPECS:-llama-3.2-1b 512;llama-3.2-1b 32;llama-3.1-8b 512;qwen3-4b 8192}"
for spec in "${specs[@]}"; do
  set -- $spec
  for ((v = 0; v < ${#bins[@]}; ++v)); do
    bin=${bins[v]}
    ex=examples; [ -d "$bin/examples" ] && ex=$bin/examples  # a build may bring the examples it was made for
    [ -f "/tmp/mk-ab/$v/$1.bin" ] || "$bin/mkplan" "$ex/$1.yaml" -o "/tmp/mk-ab/$v/$1.bin" --sms 132 -q
    echo "$v $1 @$2: $(timeout 90 "$bin/mkbench" "/tmp/mk-ab/$v/$1.bin" --context "$2" --reps 30 ${args[v]} 2>&1 |
      grep -E "step \(|a launch|without" | tr -s ' ' | tr '\n' ' ')"
  done
  for ((v = ${TRACE_BASE:-1}; v < ${#bins[@]}; ++v)); do
    [ "${TRACE:-0}" = 1 ] || break
    t="$LOG/trace-$v-$1-$2"
    timeout 90 "${bins[v]}/mkbench" "/tmp/mk-ab/$v/$1.bin" --context "$2" ${args[v]} --trace "$t" > "$t.txt" 2>&1
    echo "build $v:"; sed -n '/per op name/,/ at context /p' "$t.txt" | sed '1d;$d'
    rm -f "$t.svg" "$t.json"  # the summary is what comes back; the picture and events stay behind
  done
done
