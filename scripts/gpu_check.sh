#!/usr/bin/env bash
# Everything one visit to the GPU machine runs: the GPU test binary, the comparisons with
# transformers, mkrun decode timings, and the interpreter benchmark (bench/run.sh). Binaries
# come prebuilt in $BIN (scripts/gpu_build.sh on the development machine). Everything printed
# also goes to $LOG/gpu_check.log; LOG is $1, else $OUT, else out/gpu. QUICK=1 runs only the GPU
# tests and the interpreter benchmark (for iterating on the interpreter).
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

step "GPU"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
date -u

step "GPU tests"
"$BIN/mk_gpu_tests" || status=1

if [ "${QUICK:-0}" = 1 ]; then
  step "interpreter benchmark"
  bash bench/run.sh "$BIN" "$LOG" || status=1
  step "result"
  [ $status = 0 ] && echo "all GPU checks passed" || echo "SOME GPU CHECKS FAILED"
  exit $status
fi

for ex in tiny-llama llama-3.2-1b qwen3-4b; do
  step "transformers comparison: $ex"
  python3 tests/gpu/hf_compare.py --example "examples/$ex.yaml" --bin "$BIN" --work "$WORK/$ex" 2>&1 |
    grep -v "Writing model shards" || status=1
done

# mkrun end to end on the checkpoints the comparisons wrote: the per-token time of the greedy
# steps after a long prompt (prefill runs as decode steps too; each step reads its token back).
timing() {  # example, prompt length, tokens
  step "mkrun timing: $1, $2-token prompt + $3 tokens"
  local ids
  ids=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range($2)))")
  "$BIN/mkrun" "$WORK/$1/sched.bin" "$WORK/$1/ckpt" --backend cuda --prompt-ids "$ids" --tokens "$3" | tail -n 2 || status=1
}
timing llama-3.2-1b 512 128
timing qwen3-4b 8128 64

step "mkrun --trace: llama-3.2-1b (the last of 16 steps, into LOG/mkrun-trace-llama-3.2-1b.{json,svg})"
"$BIN/mkrun" "$WORK/llama-3.2-1b/sched.bin" "$WORK/llama-3.2-1b/ckpt" --backend cuda --prompt-ids 128000,791,1888 \
  --tokens 14 --trace "$LOG/mkrun-trace-llama-3.2-1b" | tail -n 10 || status=1

step "baseline: transformers eager"
python3 bench/torch_baseline.py "$WORK/llama-3.2-1b/ckpt" --context 512 --steps 64 2>&1 | tail -n 1 || status=1
python3 bench/torch_baseline.py "$WORK/qwen3-4b/ckpt" --context 8128 --steps 32 2>&1 | tail -n 1 || status=1

step "interpreter benchmark"
bash bench/run.sh "$BIN" "$LOG" || status=1

step "result"
[ $status = 0 ] && echo "all GPU checks passed" || echo "SOME GPU CHECKS FAILED"
exit $status
