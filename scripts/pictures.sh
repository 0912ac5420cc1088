#!/usr/bin/env bash
# The pictures of docs/design.md, regenerated from the examples with the tools in BUILD (default build/):
#   docs/llama-3.2-1b-ops.svg          op-level dependency graph of Llama-3.2-1B (mkplan --dot)
#   docs/llama-3.2-1b-layer0-tasks.svg the attention tasks of its layer 0 with counters and SMs (--dot-layers 0 --dot-ops)
#   docs/tiny-llama-trace.svg          a decode step of tiny-llama on the emulator's logical clock (mkrun --trace)
# Prints each picture's render time and size. Needs Graphviz dot. Usage: scripts/pictures.sh [BUILD]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=docs
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mk-pictures.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
for tool in mkplan mkrun mkweights; do
  [ -x "$BUILD/$tool" ] || { echo "pictures.sh: $BUILD/$tool is missing (scripts/setup.sh builds it)" >&2; exit 1; }
done
command -v dot >/dev/null || { echo "pictures.sh: Graphviz dot is not installed" >&2; exit 1; }

# render DOT SVG: dot -Tsvg, timed; prints the size at 96 dpi (Graphviz sizes are in points).
render() {
  local start end size w h
  start=$(date +%s%N)
  dot -Tsvg "$1" -o "$2"
  end=$(date +%s%N)
  size=$(grep -m1 -o 'width="[0-9.]*pt" height="[0-9.]*pt"' "$2")
  w=$(sed -E 's/width="([0-9]+).*/\1/' <<<"$size")
  h=$(sed -E 's/.*height="([0-9]+).*/\1/' <<<"$size")
  echo "$2: dot -Tsvg $(((end - start) / 1000000)) ms, $((w * 4 / 3)) x $((h * 4 / 3)) px at 96 dpi, $(wc -c <"$2") bytes"
}

"$BUILD/mkplan" examples/llama-3.2-1b.yaml -o "$WORK/l1.bin" -q --dot "$WORK/ops.dot"
render "$WORK/ops.dot" "$OUT/llama-3.2-1b-ops.svg"
"$BUILD/mkplan" examples/llama-3.2-1b.yaml -o "$WORK/l1.bin" -q --dot "$WORK/tasks.dot" --dot-level task --dot-layers 0 --dot-ops 'qkv*,attn*'
render "$WORK/tasks.dot" "$OUT/llama-3.2-1b-layer0-tasks.svg"

# The trace: no GPU here, so the emulator's logical clock (one tick per instruction) on tiny-llama
# planned for 16 SMs; the last of 4 steps is traced.
"$BUILD/mkplan" examples/tiny-llama.yaml -o "$WORK/tiny.bin" --sms 16 -q
"$BUILD/mkweights" "$WORK/tiny.bin" -o "$WORK/w" --seed 1 >/dev/null
"$BUILD/mkrun" "$WORK/tiny.bin" "$WORK/w" --backend emulator --prompt-ids 1,2,3 --tokens 2 --trace "$WORK/trace" >"$WORK/run.txt"
# The title names the schedule file; say which model it is rather than a temporary path.
sed "s|$WORK/tiny.bin|tiny-llama, 16 SMs|" "$WORK/trace.svg" >"$OUT/tiny-llama-trace.svg"
echo "$OUT/tiny-llama-trace.svg: $(wc -c <"$OUT/tiny-llama-trace.svg") bytes ($(grep -m1 'step span' "$WORK/run.txt"))"
