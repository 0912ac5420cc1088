#!/usr/bin/env bash
# Steps of many tokens on the GPU machine: prefill of a 2048-token prompt (mkbench --prefill, the
# schedule planned with --max-tokens T) beside one transformers forward over the same prompt
# (bench/prefill_baseline.py), and sequences decoded together (mkbench --batch B) beside one.
# Usage: bench/rows.sh [BIN] [LOG]. PREFILL lists "model T" pairs, BATCH "model context Bs" triples;
# BASELINES=0 skips transformers.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-out/gpu-bin}
LOG=${2:-${OUT:-out/bench}}
mkdir -p "$LOG" /tmp/mk-bench
status=0
sms=$(python3 -c "import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)")
IFS=';' read -ra prefill <<< "${PREFILL:-llama-3.2-1b 64;llama-3.2-1b 128;llama-3.1-8b 128}"
for spec in "${prefill[@]}"; do
  set -- $spec
  sched=/tmp/mk-bench/$1-t$2.bin
  [ -f "$sched" ] || "$BIN/mkplan" "examples/$1.yaml" -o "$sched" --sms "$sms" --max-tokens "$2" -q || status=1
  "$BIN/mkbench" "$sched" --prefill 2048 --reps 12 | grep prefill || status=1
done
if [ "${BASELINES:-1}" != 0 ]; then
  for m in $(for spec in "${prefill[@]}"; do echo "${spec%% *}"; done | sort -u); do
    timeout 240 python3 bench/prefill_baseline.py "examples/$m.yaml" --prompt 2048 || status=1
  done
fi
IFS=';' read -ra batch <<< "${BATCH:-qwen3-4b 8192 1 2 4 8;llama-3.2-1b 512 1 2 4 8}"
for spec in "${batch[@]}"; do
  set -- $spec
  model=$1 context=$2; shift 2
  sched=/tmp/mk-bench/$model-t8.bin
  [ -f "$sched" ] || "$BIN/mkplan" "examples/$model.yaml" -o "$sched" --sms "$sms" --max-tokens 8 -q || status=1
  for b in "$@"; do
    echo "[$model, context $context, batch $b, planned for 8 tokens a step]"
    "$BIN/mkbench" "$sched" --context "$context" --batch "$b" --reps 20 | grep -E "step|sequences a step" || status=1
  done
done
exit $status
