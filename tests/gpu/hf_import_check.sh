#!/usr/bin/env bash
# Teacher-forced comparisons with transformers for models planned straight from their
# config.json (no YAML): Llama-3.2-3B (24 q heads over 8 kv heads), Qwen2.5-1.5B (q/k/v biases,
# 12 over 2), Mistral-7B (no head_dim in config.json) and Qwen3-8B shapes, each cut to LAYERS
# layers (default 4), random weights with norms and biases perturbed away from ones and zeros,
# a prompt of PROMPT random tokens (default 1100, past 1K) and 33 greedy steps. Then two float8
# checkpoints, their projections e4m3 with scales beside them and a quantization_config in
# config.json: the Llama-3.2-3B shape per row (compressed-tensors, NAME llama-3.2-3b-fp8-row) and
# the Qwen3-8B shape in 128 x 128 blocks (fp8, NAME qwen3-8b-fp8-block128), each compared with
# transformers running the dequantized weights. Each comparison is bounded by TIMEOUT seconds
# (default 140) and prints one line: PASS NAME or FAIL NAME (why); the details go to WORK/NAME.log.
#
# Usage (on the GPU machine, from the repository root): tests/gpu/hf_import_check.sh BIN WORK
#   BIN: folder with mkplan and mkrun (a CUDA build); WORK: scratch folder (checkpoints of a few GB)
# Exit status 1 when any comparison fails.
set -u
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BIN WORK" >&2
  exit 2
fi
BIN=$(cd "$1" && pwd) || exit 2
WORK=$2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd) || exit 2
TIMEOUT=${TIMEOUT:-140}
PROMPT=${PROMPT:-1100}
LAYERS=${LAYERS:-4}
mkdir -p "$WORK" || exit 2
failed=0
# compare NAME ARGS...: one hf_compare.py run (ARGS pick the model) in WORK/NAME, logged to WORK/NAME.log.
compare() {
  local name=$1 log=$WORK/$1.log rc summary why
  shift
  timeout "$TIMEOUT" python3 "$ROOT/tests/gpu/hf_compare.py" "$@" --layers "$LAYERS" \
    --prompt "$PROMPT" --bin "$BIN" --work "$WORK/$name" >"$log" 2>&1
  rc=$?
  summary=$(grep -E ': [0-9]+ steps teacher-forced' "$log" | tail -n 1)
  if [[ $rc -eq 0 ]]; then
    echo "PASS $name: $summary"
  else
    why="exit $rc"
    [[ $rc -eq 124 ]] && why="timed out after ${TIMEOUT}s"
    echo "FAIL $name ($why): ${summary:-$(tail -n 1 "$log")}"
    failed=1
  fi
  rm -rf "$WORK/$name/ckpt"  # a few GB each
}
for entry in llama:llama-3.2-3b qwen2:qwen2.5-1.5b mistral:mistral-7b qwen3:qwen3-8b; do
  family=${entry%%:*} shape=${entry#*:}
  compare "$shape" --family "$family" --shape "$shape"
done
# Float8 projections: per-row scales (compressed-tensors) and 128 x 128 blocks (fp8).
compare llama-3.2-3b-fp8-row --family llama --shape llama-3.2-3b --fp8 row
compare qwen3-8b-fp8-block128 --family qwen3 --shape qwen3-8b --fp8 block128
exit $failed
