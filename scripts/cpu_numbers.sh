#!/usr/bin/env bash
# The CPU-side numbers the docs quote, measured here with the tools of a build folder (it builds
# nothing): planning the examples for 132 SMs (tasks, counters, file size, mkplan's own time and
# the wall time), the cost model's predicted steps, the schedule file the corruption test flips,
# the emulator's time per token, and the tokenizer's load and encode times on the files of
# tests/tokenizer/models/ (scripts/fetch_tokenizers.sh gets them; skipped when absent).
# Each number is on a labelled line. Times are the best of REPS runs (default 3): wall, and CPU
# (user + sys, which a busy machine inflates less).
# Usage: scripts/cpu_numbers.sh BUILD [REPS]      e.g. scripts/cpu_numbers.sh build 5
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: scripts/cpu_numbers.sh BUILD [REPS]}
REPS=${2:-3}
for tool in mkplan mkweights mkrun mktoken; do
  [ -x "$BUILD/$tool" ] || { echo "cpu_numbers.sh: $BUILD/$tool is missing (build it first)" >&2; exit 1; }
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mk-cpu-numbers.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# best CMD...: runs CMD REPS times (stdout to $WORK/out.N and, the last run's, $WORK/out; stderr to
# $WORK/err) and sets BEST_WALL and BEST_CPU to the smallest wall and user + sys seconds.
best() {
  local i t wall cpu
  BEST_WALL=; BEST_CPU=
  rm -f "$WORK"/out.*
  for ((i = 0; i < REPS; ++i)); do
    t=$( { TIMEFORMAT='%3R %3U %3S'; time "$@" >"$WORK/out" 2>"$WORK/err"; } 2>&1 )
    cp "$WORK/out" "$WORK/out.$i"
    wall=$(awk '{print $1}' <<<"$t")
    cpu=$(awk '{printf "%.3f", $2 + $3}' <<<"$t")
    if [ -z "$BEST_WALL" ] || awk -v a="$wall" -v b="$BEST_WALL" 'BEGIN{exit !(a < b)}'; then BEST_WALL=$wall; fi
    if [ -z "$BEST_CPU" ] || awk -v a="$cpu" -v b="$BEST_CPU" 'BEGIN{exit !(a < b)}'; then BEST_CPU=$cpu; fi
  done
}

# min A B: the smaller of two numbers (A may be empty).
min() { if [ -z "$1" ] || awk -v a="$2" -v b="$1" 'BEGIN{exit !(a < b)}'; then echo "$2"; else echo "$1"; fi; }

mem_gib=$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)
cpu_model=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
echo "machine: ${cpu_model:-unknown CPU}, $(nproc) cores, $mem_gib GiB; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "date: $(date -u +%Y-%m-%d) (UTC); commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (tree modified)'); best of $REPS runs"

# Planning: mkplan's first summary line and its own "planned and verified in" time.
for model in llama-3.2-1b qwen3-4b llama-3.1-8b; do
  best "$BUILD/mkplan" "examples/$model.yaml" -o "$WORK/$model.bin" --sms 132
  summary=$(head -1 "$WORK/out" | sed 's/^model [^:]*: //')
  own=$(cat "$WORK"/out.* | grep -o 'planned and verified in [0-9.]* ms' | grep -o '[0-9.]*' | sort -g | head -1)
  echo "plan $model, 132 SMs: $summary; $(stat -c %s "$WORK/$model.bin") bytes; mkplan's own time (planned and verified) $own ms; wall $BEST_WALL s, CPU $BEST_CPU s"
  echo "predicted step $model (schedules/cost.hpp): $(grep '^predicted step' "$WORK/out" | sed -E 's/^predicted step: *//; s/ \(schedules.*//')"
done

# The schedule the byte-flip test of tests/test_schedule.cpp corrupts: tiny-llama for 132 SMs.
"$BUILD/mkplan" examples/tiny-llama.yaml -o "$WORK/tiny.bin" --sms 132 -q
echo "schedule file of tiny-llama, 132 SMs (one single-byte flip per byte in tests/test_schedule.cpp): $(stat -c %s "$WORK/tiny.bin") bytes"

# The emulator: tiny-llama planned for 132 SMs, random weights, 16 steps; mkrun's own us/token.
"$BUILD/mkweights" "$WORK/tiny.bin" -o "$WORK/tiny-w" --seed 1 >/dev/null
emu=
for ((i = 0; i < REPS; ++i)); do
  us=$("$BUILD/mkrun" "$WORK/tiny.bin" "$WORK/tiny-w" --backend emulator --prompt-ids 1 --tokens 16 | grep -o '[0-9.]* us/token' | grep -o '^[0-9.]*')
  if [ -z "$emu" ] || awk -v a="$us" -v b="$emu" 'BEGIN{exit !(a < b)}'; then emu=$us; fi
done
echo "emulator tiny-llama, 132 SMs, 16 steps (mkrun's own time): $emu us/token"

# The tokenizer: load (a one-word text) and encode (1,000,000 bytes of the repository's own text
# and code, so the encode time is well above the noise; given per 100 KB).
models=tests/tokenizer/models
if [ -d "$models" ] && ls "$models"/*/tokenizer.json >/dev/null 2>&1; then
  git ls-files '*.md' '*.cpp' '*.hpp' '*.cuh' | xargs cat 2>/dev/null | head -c 1000000 >"$WORK/text.txt" || true
  time_flag=()
  "$BUILD/mktoken" --help 2>/dev/null | grep -q -- '--time' && time_flag=(--time)
  for dir in "$models"/*/; do
    name=$(basename "$dir")
    vocab=$( (jq '.model.vocab | length' "$dir/tokenizer.json" 2>/dev/null ||
      python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["model"]["vocab"]))' "$dir/tokenizer.json" 2>/dev/null) | head -1)
    # Load and encode runs taken in turn, so that both see the same load on a busy machine. A
    # mktoken with --time also prints its own load and encode times (stderr: "mktoken: loaded ...
    # in X ms", "mktoken: encoded ... in X ms"); the smallest of each is kept.
    lw=; lc=; ew=; ec=; own_load=; own_encode=
    for ((r = 0; r < REPS; ++r)); do
      REPS=1 best "$BUILD/mktoken" "$dir" "Hello"
      lw=$(min "$lw" "$BEST_WALL"); lc=$(min "$lc" "$BEST_CPU")
      REPS=1 best "$BUILD/mktoken" "$dir" --file "$WORK/text.txt" "${time_flag[@]}"
      ew=$(min "$ew" "$BEST_WALL"); ec=$(min "$ec" "$BEST_CPU")
      t=$(sed -n 's/^mktoken: loaded .* in \([0-9.]*\) ms$/\1/p' "$WORK/err" | head -1)
      [ -n "$t" ] && own_load=$(min "$own_load" "$t")
      t=$(sed -n 's/^mktoken: encoded .* in \([0-9.]*\) ms$/\1/p' "$WORK/err" | head -1)
      [ -n "$t" ] && own_encode=$(min "$own_encode" "$t")
    done
    echo "tokenizer load $name (${vocab:-?} tokens in its vocab, tokenizer.json $(stat -c %s "$dir/tokenizer.json") bytes): wall $lw s, CPU $lc s"
    if [ -n "$own_load$own_encode" ]; then
      awk -v n="$name" -v l="${own_load:-?}" -v e="${own_encode:-?}" -v bytes="$(stat -c %s "$WORK/text.txt")" \
        'BEGIN { printf "tokenizer %s, mktoken --time: load %s ms; encode %d bytes %s ms (%.0f ms per 100 KB)\n", n, l, bytes, e, e * 1e5 / bytes }'
    fi
    ids=$(tr ',' '\n' <"$WORK/out" | grep -c .)
    awk -v n="$name" -v w="$ew" -v lw="$lw" -v c="$ec" -v lc="$lc" -v ids="$ids" -v bytes="$(stat -c %s "$WORK/text.txt")" \
      'BEGIN { printf "tokenizer encode %s: %d bytes to %d ids; beyond the load, per 100 KB: wall %.0f ms, CPU %.0f ms\n", n, bytes, ids, (w - lw) * 1e5 / bytes * 1000, (c - lc) * 1e5 / bytes * 1000 }'
  done
  echo "tokenizer test corpus: $( (jq length tests/tokenizer/corpus.json 2>/dev/null ||
    python3 -c 'import json; print(len(json.load(open("tests/tokenizer/corpus.json"))))') | head -1) strings (tests/tokenizer/corpus.json)"
else
  echo "tokenizer: $models/*/tokenizer.json absent (scripts/fetch_tokenizers.sh gets them); not measured"
fi
