#!/usr/bin/env bash
# Nsight Compute on one decode step (default Llama-3.2-1B at context 512; MODEL=qwen3-4b
# CONTEXT=8192 for another): where the interpreter's time goes (memory traffic, local-memory
# spills, warp stalls by source line). Usage on the GPU machine: scripts/gpu_profile.sh [BIN]
# [LOG]; writes LOG/ncu-*.txt (ncu-hotspots.txt: the samples by function) and LOG/profile.ncu-rep.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-out/gpu-bin}
LOG=${2:-${OUT:-out/profile}}
MODEL=${MODEL:-llama-3.2-1b}
CONTEXT=${CONTEXT:-512}
mkdir -p "$LOG" /tmp/mk-prof
sms=$(nvidia-smi --query-gpu=name --format=csv,noheader >/dev/null 2>&1 && python3 -c "import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)" 2>/dev/null || echo 132)
"$BIN/mkplan" "examples/$MODEL.yaml" -o /tmp/mk-prof/plan.bin --sms "$sms" -q
# mkbench --reps 3 launches the kernel 6 times with 16 steps each (3 warm-up, 3 timed), then 6
# times with one step: skip 10 to profile the fifth single-step launch, one decode step.
ncu --clock-control none --launch-skip 10 --launch-count 1 -k regex:interpreter_kernel \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters \
  --section LaunchStats --section Occupancy --import-source yes -o "$LOG/profile" -f \
  "$BIN/mkbench" /tmp/mk-prof/plan.bin --context "$CONTEXT" --reps 3 > "$LOG/ncu-run.txt" 2>&1
tail -5 "$LOG/ncu-run.txt"
ncu -i "$LOG/profile.ncu-rep" --page details > "$LOG/ncu-details.txt" 2>&1
ncu -i "$LOG/profile.ncu-rep" --page source --csv --print-source sass > "$LOG/ncu-source.csv" 2>&1
grep -E "Duration|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Local|Stall|Registers|Warp Cycles|Issue" "$LOG/ncu-details.txt" | head -60
# The attention body's SASS (its own function: the kernel calls it out of line, and cuobjdump
# prints it inside the kernel's listing, found by the cubin's symbol table), for reading its
# tensor-core loop beside the per-instruction stall counts of ncu-source.csv.
if command -v cuobjdump >/dev/null && command -v readelf >/dev/null; then
  elf=$(mktemp -d) bin=$(cd "$BIN" && pwd)
  (cd "$elf" && cuobjdump -xelf all "$bin/mkbench" >/dev/null)
  cuobjdump -sass "$BIN/mkbench" > "$elf/all.sass"
  for body in attention_body matvec_body; do
    scripts/sass_slice.py "$(ls "$elf"/*.cubin | head -1)" "$elf/all.sass" $body > "$LOG/$body.sass"
    echo "$body SASS: $(grep -c ';' "$LOG/$body.sass") instructions in $LOG/$body.sass"
  done
  rm -rf "$elf"
  # The samples by function (the op bodies out of line, the rest the kernel's: its loop and the
  # producer warp) and each one's hottest instructions.
  scripts/ncu_hotspots.py "$LOG/ncu-source.csv" attention_body="$LOG/attention_body.sass" \
    matvec_body="$LOG/matvec_body.sass" > "$LOG/ncu-hotspots.txt" && head -40 "$LOG/ncu-hotspots.txt"
fi
