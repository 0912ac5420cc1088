#!/usr/bin/env bash
# Everything one call to the GPU machine runs, most important first, each step bounded in time
# so that one call (at most 10 minutes a command) ends with results: the GPU tests, the
# interpreter benchmark (bench/run.sh), steps of many tokens (bench/rows.sh, then bench/speculate.sh; ROWS=0 skips them),
# mkserve under 1, 4 and 8 streams (bench/serve.sh, with tests/tokenizer/models carried along;
# SERVE=0 skips it), the PyTorch baselines of the same shapes
# (bench/torch_baseline.py; BASELINES=0 skips them, COMPILE=0 skips torch.compile; STAGES="0 10 9 8"
# adds a sweep of the weight ring's depth after the benchmark, in QUICK mode too; LONG=1 adds
# contexts of 8192 and 32768 with their baselines and the comparison after an 8300-token prompt,
# LONG=only runs the GPU tests, the benchmark and that set alone), the comparisons with transformers (the
# examples, then models planned straight from config.json: tests/gpu/hf_import_check.sh), mkrun
# end-to-end timings and a trace, compute-sanitizer on the tiny models (SAN=0 skips it), and the
# Qwen3-4B comparison and timing last. The float8 comparisons with transformers run after the
# baselines' table (FP8=0 skips them; FP8=only runs the GPU tests, unless GPU_TESTS=0, and them alone). BUDGET (seconds, default 540) bounds the whole call: a step that would start
# with too little time left is skipped and says so.
# Binaries come prebuilt in $BIN (scripts/gpu_build.sh on the development machine).
# Everything printed goes to $LOG/gpu_check.log, and $LOG/RESULTS-table.md gets the table
# (bench/results.py). LOG is $1, else $OUT, else out/gpu. QUICK=1 runs only the GPU tests and
# the interpreter benchmark (for iterating on the interpreter); SAN_ONLY=1 the GPU tests and
# compute-sanitizer; GPU_TESTS=0 skips the GPU tests (with SAN_ONLY=1: the sanitizer alone).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${1:-${OUT:-out/gpu}}
BIN=${BIN:-out/gpu-bin}
WORK=${WORK:-/tmp/mk-gpu}
mkdir -p "$LOG" "$WORK"
export MK_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
exec > >(tee "$LOG/gpu_check.log") 2>&1
status=0
step() { echo; echo "=== $* ==="; }
DEADLINE=$((SECONDS + ${BUDGET:-540}))
time_left() {  # at most $1 seconds, and no more than the call has left
  local left=$((DEADLINE - SECONDS))
  echo $(( $1 < left ? $1 : left ))
}
bounded() {  # seconds, command...: runs it; a time-out counts as a failure
  local limit
  limit=$(time_left "$1"); shift
  if [ "$limit" -le 5 ]; then echo "SKIPPED (the call is out of time): $*"; return 1; fi
  timeout "$limit" "$@"
  local rc=$?
  [ $rc = 124 ] && echo "TIMED OUT after $limit s: $*"
  return $rc
}

# Float8 checkpoints against transformers float32 on the same weights dequantized (transformers
# bf16's error on them the bar); Qwen3-4B past 8K positions.
fp8_compare() {  # example, layout, seconds, hf_compare.py options...
  step "transformers comparison, float8: $1 ($2${4:+, ${*:4}})"
  bounded "$3" python3 tests/gpu/hf_compare.py --example "examples/$1.yaml" --fp8 "$2" --bin "$BIN" --work "$WORK/fp8-$1-$2" \
    "${@:4}" 2>&1 | grep -v "Writing model shards" || status=1
}
fp8_set() {
  fp8_compare tiny-llama row 60
  fp8_compare tiny-qwen3 block128 60
  fp8_compare tiny-llama tensor 60
  fp8_compare llama-3.2-1b row 150
  fp8_compare llama-3.2-1b row 150 --max-tokens 16 --prompt 100
  fp8_compare qwen3-4b block128 300 --prompt 8200 --tokens 33
}

step "GPU"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
date -u
echo "commit: $(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)"

if [ "${GPU_TESTS:-1}" != 0 ]; then
  step "GPU tests"
  # The suite took ~117 s at fa121ab and 183 s at 5e78137 (20 test cases) on a cold machine.
  bounded 260 "$BIN/mk_gpu_tests" || status=1
fi

if [ "${FP8:-1}" = only ]; then
  fp8_set
  step "result"
  [ $status = 0 ] && echo "all GPU checks passed" || echo "SOME GPU CHECKS FAILED"
  exit $status
fi

if [ "${SAN_ONLY:-0}" != 1 ]; then
step "interpreter benchmark"
bounded 180 bash bench/run.sh "$BIN" "$LOG" || status=1
if [ -n "${STAGES:-}" ]; then  # what the weight ring's depth buys, on the schedules bench/run.sh planned
  step "ring depth sweep: mkbench --stages N for N in $STAGES (0: as many as shared memory holds), two rounds"
  for round in 1 2; do
    for spec in "llama-3.2-1b 512" "llama-3.2-1b 32" "qwen3-4b 8192" "llama-3.1-8b 512"; do
      set -- $spec
      for n in $STAGES; do
        line=$(bounded 60 "$BIN/mkbench" "/tmp/mk-bench/$1-round-robin.bin" --context "$2" --reps 30 --stages "$n" |
          grep -m1 "step (median") || status=1
        echo "round $round, $1 at $2, stages $n: ${line#*: }"
      done
    done
  done
fi
if [ "${ROWS:-1}" != 0 ]; then  # steps of many tokens: prefill beside transformers, sequences decoded together
  step "prefill and batches (bench/rows.sh)"
  bounded 420 bash bench/rows.sh "$BIN" "$LOG" || status=1
  step "speculative decoding against plain (bench/speculate.sh)"
  bounded 300 bash bench/speculate.sh "$BIN" "$LOG" || status=1
fi
if [ "${SERVE:-1}" != 0 ]; then  # mkserve under 1, 4 and 8 concurrent streams
  step "mkserve under load (bench/serve.sh)"
  bounded 240 bash bench/serve.sh "$BIN" "$LOG" || status=1
fi
if [ "${QUICK:-0}" = 1 ]; then
  step "result"
  [ $status = 0 ] && echo "all GPU checks passed" || echo "SOME GPU CHECKS FAILED"
  exit $status
fi

if [ "${LONG:-0}" != 0 ]; then  # the long-context set: attention's share of the step grows with the context
  step "interpreter benchmark, long contexts"
  SPECS="llama-3.2-1b 8192 round-robin;llama-3.2-1b 32768 round-robin;qwen3-4b 32768 round-robin" TRACE=qwen3-4b \
    bounded 240 bash bench/run.sh "$BIN" "$LOG" || status=1
  for spec in "llama-3.2-1b 8192" "llama-3.2-1b 32768" "qwen3-4b 32768"; do
    set -- $spec
    bounded 90 python3 bench/torch_baseline.py "examples/$1.yaml" --context "$2" --variants eager,graph || status=1
  done
  # Past 8192 positions Llama-3's RoPE scaling changes every low frequency: teacher-forced
  # against transformers float32 over an 8300-token prompt and 33 greedy tokens.
  step "transformers comparison: llama-3.2-1b after an 8300-token prompt"
  bounded 240 python3 tests/gpu/hf_compare.py --example examples/llama-3.2-1b.yaml --prompt 8300 --tokens 33 --bin "$BIN" \
    --work "$WORK/long-llama-3.2-1b" 2>&1 | grep -v "Writing model shards" || status=1
  if [ "$LONG" = only ]; then
    step "result"
    [ $status = 0 ] && echo "all GPU checks passed" || echo "SOME GPU CHECKS FAILED"
    exit $status
  fi
fi
[ "${FP8:-1}" != 0 ] && fp8_set
if [ "${BASELINES:-1}" != 0 ]; then
step "baselines: PyTorch eager, CUDA graph, torch.compile (same shapes, random weights)"
if [ "${COMPILE:-1}" != 0 ]; then  # torch.compile max-autotune takes about two minutes
  bounded 150 python3 bench/torch_baseline.py examples/llama-3.2-1b.yaml --context 512 || status=1
else
  bounded 60 python3 bench/torch_baseline.py examples/llama-3.2-1b.yaml --context 512 --variants eager,graph || status=1
fi
bounded 60 python3 bench/torch_baseline.py examples/llama-3.2-1b.yaml --context 32 --variants eager,graph || status=1
bounded 60 python3 bench/torch_baseline.py examples/llama-3.1-8b.yaml --context 512 --variants eager,graph || status=1
bounded 60 python3 bench/torch_baseline.py examples/qwen3-4b.yaml --context 8192 --variants eager,graph || status=1
fi
python3 bench/results.py "$LOG/gpu_check.log" --commit "$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)" \
  > "$LOG/RESULTS-table.md" && cat "$LOG/RESULTS-table.md"

compare() {  # example [work folder's suffix, hf_compare.py options...]
  local example=$1 suffix=${2:-}
  shift $(($# < 2 ? $# : 2))
  step "transformers comparison: $example${suffix:+ ($*)}"
  bounded 240 python3 tests/gpu/hf_compare.py --example "examples/$example.yaml" --bin "$BIN" --work "$WORK/$example$suffix" "$@" 2>&1 |
    grep -v "Writing model shards" || status=1
}
# mkrun end to end on the checkpoints the comparisons wrote: the per-token time of the greedy
# steps after a long prompt (prefill runs as decode steps too; tokens are fed on the device and
# read back once per 16 steps).
timing() {  # example, prompt length, tokens
  step "mkrun timing: $1, $2-token prompt + $3 tokens"
  local ids
  ids=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range($2)))")
  bounded 120 "$BIN/mkrun" "$WORK/$1/sched.bin" "$WORK/$1/ckpt" --backend cuda --prompt-ids "$ids" --tokens "$3" | tail -n 2 ||
    status=1
}
compare tiny-llama
compare llama-3.2-1b
# Steps of several tokens: a prompt prefilled 16 positions a step; four prompts decoded together.
compare llama-3.2-1b -t16 --prompt 100 --max-tokens 16
compare llama-3.2-1b -b4 --prompt 20 --batch 4
# Decode at positions 384 to 511: short steps (past 512 the attention splits). The benchmark's
# row at 512 runs positions 511-526, split steps but the first, so the benchmark is also run at
# 448 (positions 447-462, short steps) for a comparison step for step (docs/notes.md 117).
timing llama-3.2-1b 384 128
step "mkbench at context 448 (positions 447-462: short steps, as the decode above)"
bounded 60 "$BIN/mkbench" "$WORK/llama-3.2-1b/sched.bin" --context 448 --reps 30 | grep -m1 "step (median" || status=1

step "transformers comparisons of models planned from config.json (no YAML), 1100-token prompts"
bounded 330 env TIMEOUT=110 bash tests/gpu/hf_import_check.sh "$BIN" "$WORK/hf-import" || status=1

step "mkrun --trace: llama-3.2-1b (the last of 16 steps, into LOG/mkrun-trace-llama-3.2-1b.{json,svg})"
bounded 60 "$BIN/mkrun" "$WORK/llama-3.2-1b/sched.bin" "$WORK/llama-3.2-1b/ckpt" --backend cuda --prompt-ids 128000,791,1888 \
  --tokens 14 --trace "$LOG/mkrun-trace-llama-3.2-1b" | tail -n 10 || status=1

fi

# --- compute-sanitizer --------------------------------------------------------------------------
# memcheck, racecheck, synccheck and initcheck on the CUDA interpreter through mkrun, on both
# tiny models (schedules for this GPU's SM count, random checkpoints from mkweights). Under the
# sanitizer the interpreter runs orders of magnitude slower (racecheck most), so mkrun's watchdog
# is raised (SAN_WATCHDOG seconds, default 600) and each run is bounded by SAN_TIMEOUT (default
# 1200 s) and by the call's time left. Some runtimes refuse the sanitizer (gVisor: "Device not supported", then error 999):
# this section then says so plainly, names the runtime it met, and does not fail the call.
# SAN_TOOLS picks the tools (default all four); SAN=0 skips the section.
# The findings a compute-sanitizer log reports (errors, plus racecheck's hazard warnings);
# nothing when it printed no summary (it did not run).
san_findings() {
  local e r
  e=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$1" | tail -n 1)
  r=$(sed -n 's/.*RACECHECK SUMMARY: .*(\([0-9]*\) errors\?, \([0-9]*\) warnings\?).*/\1 \2/p' "$1" | tail -n 1)
  if [[ -n $r ]]; then echo $(( ${r% *} + ${r#* } + ${e:-0} )); elif [[ -n $e ]]; then echo "$e"; fi
}

sanitizer_checks() {
  step "compute-sanitizer"
  local cs runtime
  cs=$(command -v compute-sanitizer || true)
  [[ -z $cs && -x /usr/local/cuda/bin/compute-sanitizer ]] && cs=/usr/local/cuda/bin/compute-sanitizer
  runtime="kernel $(uname -r), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
  echo "runtime: $runtime"
  if [[ -z $cs ]]; then
    echo "compute-sanitizer: NOT RUN: compute-sanitizer is not installed on this machine ($runtime)"
    return 0
  fi
  "$cs" --version | tail -n 1
  local sms ex tool out rc findings
  sms=$(nvidia-smi --query-gpu=multiprocessor_count --format=csv,noheader 2>/dev/null | head -n 1)
  [[ $sms =~ ^[0-9]+$ ]] || sms=132
  for ex in tiny-llama tiny-qwen3; do
    "$BIN/mkplan" "examples/$ex.yaml" -o "$WORK/san-$ex.bin" --sms "$sms" -q &&
      "$BIN/mkweights" "$WORK/san-$ex.bin" -o "$WORK/san-$ex-w" --seed 5 >/dev/null ||
      { echo "compute-sanitizer: could not prepare $ex"; status=1; return 0; }
  done
  local wd=${SAN_WATCHDOG:-600} limit
  limit=$(time_left "${SAN_TIMEOUT:-1200}")
  [[ $limit -le 5 ]] && { echo "compute-sanitizer: SKIPPED: the call is out of time"; return 0; }
  local run=(--backend cuda --prompt-ids 1,2,3 --tokens 3 --watchdog "$wd")
  # Can the sanitizer attach here at all? A refusal prints no ERROR SUMMARY.
  out=$WORK/san-probe.log
  timeout "$limit" "$cs" --tool memcheck "$BIN/mkrun" "$WORK/san-tiny-llama.bin" "$WORK/san-tiny-llama-w" "${run[@]}" >"$out" 2>&1
  if [[ -z $(san_findings "$out") ]]; then
    echo "compute-sanitizer: NOT RUN: it cannot run on this runtime ($runtime); it said:"
    grep -v '^tokens:' "$out" | head -n 5 | sed 's/^/  /'
    return 0
  fi
  for ex in ${SAN_MODELS:-tiny-llama tiny-qwen3}; do
    for tool in ${SAN_TOOLS:-memcheck racecheck synccheck initcheck}; do
      limit=$(time_left "${SAN_TIMEOUT:-1200}")
      [[ $limit -le 5 ]] && { echo "compute-sanitizer $tool, $ex: SKIPPED: the call is out of time"; continue; }
      out=$WORK/san-$ex-$tool.log
      local extra=()
      [[ $tool == racecheck ]] && extra=(--racecheck-report all)
      SECONDS=0
      timeout "$limit" "$cs" --tool "$tool" "${extra[@]}" --error-exitcode 99 \
        "$BIN/mkrun" "$WORK/san-$ex.bin" "$WORK/san-$ex-w" "${run[@]}" >"$out" 2>&1
      rc=$?
      findings=$(san_findings "$out")
      if [[ $rc == 0 && $findings == 0 ]] && grep -q '^tokens:' "$out"; then
        echo "compute-sanitizer $tool, $ex: 0 findings (${SECONDS} s)"
      else
        echo "compute-sanitizer $tool, $ex: FAILED (exit $rc, ${findings:-no} findings reported, ${SECONDS} s):"
        grep -E 'SUMMARY|mkrun:' "$out" | head -n 4 | sed 's/^/  /'
        echo "  source lines named in its reports (count):"
        grep -oE 'in [A-Za-z_]+\.(cuh|cu|cpp|hpp):[0-9]+' "$out" | sort | uniq -c | sort -rn | head -n 8 | sed 's/^/  /'
        status=1
      fi
    done
  done
}
[[ ${SAN:-1} == 0 ]] || sanitizer_checks
if [ "${SAN_ONLY:-0}" != 1 ]; then
compare qwen3-4b
timing qwen3-4b 8128 64
fi

python3 bench/results.py "$LOG/gpu_check.log" --commit "$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)" > "$LOG/RESULTS-table.md"
step "result"
[ $status = 0 ] && echo "all GPU checks passed" || echo "SOME GPU CHECKS FAILED"
exit $status
