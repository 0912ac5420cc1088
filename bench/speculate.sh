#!/usr/bin/env bash
# Speculative decoding (mkrun --speculate ngram:K) against plain decoding, on the GPU machine:
# Llama-3.2-1B with random bf16 weights (mkweights), a repetitive prompt (a passage of 64 random
# ids four times) and a free one (256 random ids), 256 tokens each, greedy; then the free prompt
# sampled at temperature 1 (seed 7; a sample op in place of the argmax), where the random model's
# text stops repeating itself and drafts are seldom found or kept: the case where speculation
# must cost nothing. Plain on the one-token schedule, speculation on schedules of K + 1 tokens a
# step. Prints mkrun's decode time per token and what speculation kept. Random weights decide
# what the model writes: greedy, this one repeats one token on either prompt, so the acceptance
# rates say how this model continues these prompts, not how a trained one would.
# Usage: bench/speculate.sh [BIN] [LOG]. MODEL (default llama-3.2-1b), DRAFTS (default "4 8 16"),
# IDS: the range of the prompts' ids (default "1000 100000"; "10 500" for the tiny examples).
# TEXTS: which of repetitive, free and sampled (default all three).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-out/gpu-bin}
LOG=${2:-${OUT:-out/bench}}
MODEL=${MODEL:-llama-3.2-1b}
mkdir -p "$LOG" /tmp/mk-spec
status=0
sms=$(nvidia-smi --query-gpu=multiprocessor_count --format=csv,noheader 2>/dev/null | head -n 1)
[[ $sms =~ ^[0-9]+$ ]] || sms=132
dir=/tmp/mk-spec
"$BIN/mkplan" "examples/$MODEL.yaml" -o "$dir/t1.bin" --sms "$sms" -q || status=1
# The model with a sample op in place of its argmax, for the sampled run.
sed -E 's/\{op: argmax, in: logits, out: next_token[^}]*\}/{op: sample, in: logits, out: next_token}/' "examples/$MODEL.yaml" > "$dir/sample.yaml"
[ -s "$dir/w/model.safetensors" ] || "$BIN/mkweights" "$dir/t1.bin" -o "$dir/w" --seed 1 >/dev/null || status=1
read -r lo hi <<< "${IDS:-1000 100000}"  # the prompts' ids are drawn from [lo, hi)
repetitive=$(python3 -c "import random; r=random.Random(5); p=[r.randrange($lo, $hi) for _ in range(64)]; print(','.join(map(str, p*4)))")
free=$(python3 -c "import random; r=random.Random(6); print(','.join(str(r.randrange($lo, $hi)) for _ in range(256)))")
for text in ${TEXTS:-repetitive free sampled}; do
  ids=${!text:-$free} model=examples/$MODEL.yaml prefix=t sampling=()
  if [ "$text" = sampled ]; then model=$dir/sample.yaml prefix=s sampling=(--temperature 1 --seed 7); fi
  echo "--- $MODEL, $text prompt (256 ids), 256 tokens"
  echo "plain (one token a step):"
  [ -f "$dir/${prefix}1.bin" ] || "$BIN/mkplan" "$model" -o "$dir/${prefix}1.bin" --sms "$sms" -q || status=1
  timeout 120 "$BIN/mkrun" "$dir/${prefix}1.bin" "$dir/w" --prompt-ids "$ids" --tokens 256 "${sampling[@]}" > "$LOG/spec-$text-plain.txt" ||
    status=1
  grep -E "decode after" "$LOG/spec-$text-plain.txt"
  for k in ${DRAFTS:-4 8 16}; do
    sched=$dir/$prefix$((k + 1)).bin
    [ -f "$sched" ] || "$BIN/mkplan" "$model" -o "$sched" --sms "$sms" --max-tokens $((k + 1)) -q || status=1
    echo "--speculate ngram:$k (schedule of $((k + 1)) tokens a step):"
    timeout 120 "$BIN/mkrun" "$sched" "$dir/w" --prompt-ids "$ids" --tokens 256 --speculate "ngram:$k" "${sampling[@]}" \
      > "$LOG/spec-$text-$k.txt" || status=1
    grep -E "decode after|speculation" "$LOG/spec-$text-$k.txt"
    if [ "$(grep -m1 '^tokens:' "$LOG/spec-$text-$k.txt")" == "$(grep -m1 '^tokens:' "$LOG/spec-$text-plain.txt")" ]; then
      echo "  the same 256 tokens as plain decoding"
    else
      echo "  OTHER TOKENS than plain decoding"
      status=1
    fi
  done
done
exit $status
