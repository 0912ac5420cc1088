#!/usr/bin/env bash
# Interpreter timings on the GPU machine: plans each example for this GPU and times it with
# mkbench (random weights generated on the GPU). Usage: bench/run.sh [BIN] [LOG]
# SPECS lists "model context policy" triples (default: the benchmark's set); a model NAME/f8-LAYOUT
# is examples/NAME.yaml with its seven projections float8 of scale layout LAYOUT (tensor, row or
# block128; the embeddings and LM head bf16). TRACE lists the models to trace (default
# llama-3.2-1b): LOG/trace-NAME.json and .svg.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-out/gpu-bin}
LOG=${2:-${OUT:-out/bench}}
mkdir -p "$LOG" /tmp/mk-bench
status=0
sms=$(nvidia-smi --query-gpu=name --format=csv,noheader >/dev/null && python3 -c "import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)")
default_specs="llama-3.2-1b 32 round-robin;llama-3.2-1b 512 round-robin;llama-3.2-1b 512 critical-path;llama-3.1-8b 512 round-robin;qwen3-4b 8192 round-robin"
default_specs+=";llama-3.2-1b/f8-row 512 round-robin;llama-3.1-8b/f8-row 512 round-robin;qwen3-4b/f8-block128 8192 round-robin"
IFS=';' read -ra specs <<< "${SPECS:-$default_specs}"
for spec in "${specs[@]}"; do
  set -- $spec
  yaml="examples/$1.yaml" name=${1//\//-}
  if [[ $1 == */f8-* ]]; then
    yaml=/tmp/mk-bench/$name.yaml
    python3 scripts/float8_yaml.py "examples/${1%%/*}.yaml" "${1#*/f8-}" > "$yaml" || status=1
  fi
  "$BIN/mkplan" "$yaml" -o "/tmp/mk-bench/$name-$3.bin" --sms "$sms" --policy "$3" -q || status=1
  echo "[$1, $3, context $2]"
  trace=(); [ "$3" = round-robin ] && [ "$2" -ge 512 ] && [[ " ${TRACE:-llama-3.2-1b} " == *" $1 "* ]] && trace=(--trace "$LOG/trace-$name")
  "$BIN/mkbench" "/tmp/mk-bench/$name-$3.bin" --context "$2" "${trace[@]}" || status=1
done
exit $status
