#!/usr/bin/env bash
# Interpreter timings on the GPU machine: plans each example for this GPU and times it with
# mkbench (random weights generated on the GPU). Usage: bench/run.sh [BIN] [LOG]
# TRACE lists the examples to trace (default llama-3.2-1b): LOG/trace-NAME.json and .svg.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-out/gpu-bin}
LOG=${2:-${OUT:-out/bench}}
mkdir -p "$LOG" /tmp/mk-bench
status=0
sms=$(nvidia-smi --query-gpu=name --format=csv,noheader >/dev/null && python3 -c "import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)")
for spec in "llama-3.2-1b 512 round-robin" "llama-3.2-1b 512 critical-path" "qwen3-4b 8192 round-robin" "llama-3.1-8b 512 round-robin"; do
  set -- $spec
  "$BIN/mkplan" "examples/$1.yaml" -o "/tmp/mk-bench/$1-$3.bin" --sms "$sms" --policy "$3" -q || status=1
  echo "[$1, $3, context $2]"
  trace=(); [ "$3" = round-robin ] && [[ " ${TRACE:-llama-3.2-1b} " == *" $1 "* ]] && trace=(--trace "$LOG/trace-$1")
  "$BIN/mkbench" "/tmp/mk-bench/$1-$3.bin" --context "$2" "${trace[@]}" || status=1
done

# Plan-level variant: fewer KV splits at short context (Llama-3.2-1B, 512 positions).
sed -e 's/kv_splits: 16/kv_splits: 4/' -e 's/kv_splits: kv_splits, split: 128/kv_splits: kv_splits, split: 32/' \
  examples/llama-3.2-1b.yaml > /tmp/mk-bench/llama-3.2-1b-splits4.yaml
"$BIN/mkplan" /tmp/mk-bench/llama-3.2-1b-splits4.yaml -o /tmp/mk-bench/llama-3.2-1b-splits4.bin --sms "$sms" -q || status=1
echo "[llama-3.2-1b with kv_splits 4, round-robin, context 512]"
"$BIN/mkbench" /tmp/mk-bench/llama-3.2-1b-splits4.bin --context 512 || status=1
exit $status
