#!/usr/bin/env bash
# The long fuzz run, one command: builds the fuzz preset (clang, libFuzzer, ASan + UBSan) and
# runs each harness for SECONDS (default 600), one after the other, keeping each corpus in
# out/fuzz/HARNESS/ across runs. Prints the inputs each one ran; exit status 1 on a finding
# (saved as out/fuzz/crash-*, with libFuzzer's log in out/fuzz/HARNESS.log).
#   scripts/fuzz.sh [SECONDS] [HARNESS...]     HARNESS: yaml, schedule, safetensors, tokenizer, hfconfig (default all)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
harnesses=("$@")
((${#harnesses[@]})) || harnesses=(yaml schedule safetensors tokenizer hfconfig)
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ is missing (apt-get install clang libclang-rt-dev)" >&2; exit 2; }
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j"$(nproc)" --target "${harnesses[@]/#/fuzz_}" >/dev/null
mkdir -p out/fuzz
status=0
for h in "${harnesses[@]}"; do
  log=out/fuzz/$h.log
  if FUZZ_CORPUS=out/fuzz/$h FUZZ_ARTIFACTS=out/fuzz/ tests/fuzz/run.sh "$h" build-fuzz -max_total_time="$seconds" >"$log" 2>&1; then
    result="no finding"
  else
    result="FINDING (see $log)"
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz_$h: ${runs:-?} inputs in ${seconds} s, $result"
done
exit $status
