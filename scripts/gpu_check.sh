#!/usr/bin/env bash
# Everything one visit to the GPU machine runs, most important first, each step bounded in time
# so that one visit (at most 10 minutes a command) ends with results: the GPU tests, the
# interpreter benchmark (bench/run.sh), the PyTorch baselines of the same shapes
# (bench/torch_baseline.py), the comparisons with transformers, mkrun end-to-end timings and a
# trace, compute-sanitizer on the tiny models, and the Qwen3-4B comparison and timing last.
# Binaries come prebuilt in $BIN (scripts/gpu_build.sh on the development machine).
# Everything printed goes to $LOG/gpu_check.log, and $LOG/RESULTS-table.md gets the table
# (bench/results.py). LOG is $1, else $OUT, else out/gpu. QUICK=1 runs only the GPU tests and
# the interpreter benchmark (for iterating on the interpreter).
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
bounded() {  # seconds, command...: runs it, a time-out counts as a failure
  local limit=$1; shift
  timeout "$limit" "$@"
  local rc=$?
  [ $rc = 124 ] && echo "TIMED OUT after $limit s: $*"
  return $rc
}

step "GPU"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
date -u
echo "commit: $(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)"

step "GPU tests"
bounded 120 "$BIN/mk_gpu_tests" || status=1

step "interpreter benchmark"
bounded 180 bash bench/run.sh "$BIN" "$LOG" || status=1
if [ "${QUICK:-0}" = 1 ]; then
  step "result"
  [ $status = 0 ] && echo "all GPU checks passed" || echo "SOME GPU CHECKS FAILED"
  exit $status
fi

step "baselines: PyTorch eager, CUDA graph, torch.compile (same shapes, random weights)"
bounded 200 python3 bench/torch_baseline.py examples/llama-3.2-1b.yaml --context 512 || status=1
bounded 60 python3 bench/torch_baseline.py examples/llama-3.2-1b.yaml --context 32 --variants eager,graph || status=1
bounded 60 python3 bench/torch_baseline.py examples/llama-3.1-8b.yaml --context 512 --variants eager,graph || status=1
bounded 60 python3 bench/torch_baseline.py examples/qwen3-4b.yaml --context 8192 --variants eager,graph || status=1
python3 bench/results.py "$LOG/gpu_check.log" --commit "$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)" \
  > "$LOG/RESULTS-table.md" && cat "$LOG/RESULTS-table.md"

compare() {  # example
  step "transformers comparison: $1"
  bounded 240 python3 tests/gpu/hf_compare.py --example "examples/$1.yaml" --bin "$BIN" --work "$WORK/$1" 2>&1 |
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
timing llama-3.2-1b 512 128

step "mkrun --trace: llama-3.2-1b (the last of 16 steps, into LOG/mkrun-trace-llama-3.2-1b.{json,svg})"
bounded 60 "$BIN/mkrun" "$WORK/llama-3.2-1b/sched.bin" "$WORK/llama-3.2-1b/ckpt" --backend cuda --prompt-ids 128000,791,1888 \
  --tokens 14 --trace "$LOG/mkrun-trace-llama-3.2-1b" | tail -n 10 || status=1

compare qwen3-4b
timing qwen3-4b 8128 64

python3 bench/results.py "$LOG/gpu_check.log" --commit "$(cat "$BIN/COMMIT" 2>/dev/null || echo unknown)" > "$LOG/RESULTS-table.md"
step "result"
[ $status = 0 ] && echo "all GPU checks passed" || echo "SOME GPU CHECKS FAILED"
exit $status
