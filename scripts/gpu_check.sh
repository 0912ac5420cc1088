#!/usr/bin/env bash
# Everything one visit to the GPU machine runs: the GPU test binary, the comparisons with
# transformers, and decode timings. Binaries come prebuilt in $BIN (built on the development
# machine: scripts/gpu_build.sh). Logs go to $1 (default: $OUT, else out/gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${1:-${OUT:-out/gpu}}
BIN=${BIN:-out/gpu-bin}
WORK=${WORK:-/tmp/mk-gpu}
mkdir -p "$LOG" "$WORK"
export MK_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
status=0
step() { echo; echo "=== $* ==="; }

step "GPU"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee "$LOG/gpu.txt"
git log -1 --format='commit %H %cd' 2>/dev/null | tee -a "$LOG/gpu.txt"

step "GPU tests"
"$BIN/mk_gpu_tests" 2>&1 | tee "$LOG/gpu_tests.log"
[ "${PIPESTATUS[0]}" = 0 ] || status=1

for ex in tiny-llama llama-3.2-1b qwen3-4b; do
  step "transformers comparison: $ex"
  python3 tests/gpu/hf_compare.py --example "examples/$ex.yaml" --bin "$BIN" --work "$WORK/$ex" 2>&1 | tee "$LOG/hf_$ex.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
done

# Decode timing on the checkpoints the comparisons wrote: the per-token time of the greedy
# steps after a long prompt (prefill runs as decode steps too).
timing() {  # example, prompt length, tokens
  local ex=$1 n=$2 t=$3
  step "timing: $ex, $n-token prompt + $t tokens"
  local ids
  ids=$(python3 -c "import random; random.seed(1); print(','.join(str(random.randrange(1000, 100000)) for _ in range($n)))")
  "$BIN/mkrun" "$WORK/$ex/sched.bin" "$WORK/$ex/ckpt" --backend cuda --prompt-ids "$ids" --tokens "$t" 2>&1 | tail -n 3 | tee "$LOG/timing_$ex.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
timing llama-3.2-1b 512 128
timing qwen3-4b 8128 64

step "result"
[ $status = 0 ] && echo "all GPU checks passed" || echo "SOME GPU CHECKS FAILED"
exit $status
