#!/usr/bin/env bash
# mkserve on the GPU machine: Llama-3.2-1B (random bf16 weights, Llama-3.1's tokenizer) planned
# for 8 tokens a step, under 1, 4 and 8 concurrent streams (bench/serve_load.py), and mkbench's
# step at batch 1 of the same schedule for comparison.
# Usage: bench/serve.sh [BIN] [LOG]. BIN holds mkplan, mkweights, mkserve, mkbench (scripts/gpu_build.sh;
# libcpp-httplib's shared library beside them is found through LD_LIBRARY_PATH); the tokenizer
# comes from tests/tokenizer/models/llama3_1 (scripts/fetch_tokenizers.sh; carry it along).
# STREAMS lists the stream counts, MAX_TOKENS each request's tokens.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(cd "${1:-out/gpu-bin}" && pwd)
LOG=${2:-${OUT:-out/bench}}
mkdir -p "$LOG" /tmp/mk-serve
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
sms=$(nvidia-smi --query-gpu=multiprocessor_count --format=csv,noheader 2>/dev/null | head -n 1)
[[ $sms =~ ^[0-9]+$ ]] || sms=$(python3 -c "import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)")
w=/tmp/mk-serve/llama-3.2-1b
[ -f /tmp/mk-serve/s8.bin ] || "$BIN/mkplan" examples/llama-3.2-1b.yaml -o /tmp/mk-serve/s8.bin --sms "$sms" --max-tokens 8 -q || exit 1
[ -f "$w/model.safetensors" ] || "$BIN/mkweights" /tmp/mk-serve/s8.bin -o "$w" >/dev/null || exit 1
cp tests/tokenizer/models/llama3_1/tokenizer.json tests/tokenizer/models/llama3_1/tokenizer_config.json "$w/" || exit 1
"$BIN/mkserve" /tmp/mk-serve/s8.bin "$w" --backend cuda --port 0 --max-context 2048 2>"$LOG/mkserve.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
for _ in $(seq 1 600); do
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$LOG/mkserve.log")
  [ -n "$port" ] && break
  kill -0 $server 2>/dev/null || { cat "$LOG/mkserve.log"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "mkserve did not start"; cat "$LOG/mkserve.log"; exit 1; }
status=0
python3 bench/serve_load.py "http://127.0.0.1:$port" --streams 1 --requests 1 --max-tokens 16 >/dev/null || status=1  # warm-up
for n in ${STREAMS:-1 4 8}; do
  python3 bench/serve_load.py "http://127.0.0.1:$port" --streams "$n" --requests 2 --max-tokens "${MAX_TOKENS:-256}" || status=1
done
kill -TERM $server
wait $server || status=1
trap - EXIT
"$BIN/mkbench" /tmp/mk-serve/s8.bin --context 512 --reps 20 | grep -E "step" || status=1
tail -n 3 "$LOG/mkserve.log"
exit $status
