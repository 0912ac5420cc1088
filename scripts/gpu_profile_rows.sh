#!/usr/bin/env bash
# Where a step of several rows spends its time, on the GPU machine: mkbench's trace of one batch
# step and of a prefill (per-op summaries), then Nsight Compute on one launch of the rows
# kernel for each (warp stall reasons, memory throughput, the source lines that stall most).
# Usage: scripts/gpu_profile_rows.sh [BIN] [LOG]. MODEL (default llama-3.2-1b).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-out/gpu-bin}
LOG=${2:-${OUT:-out/profile}}
MODEL=${MODEL:-llama-3.2-1b}
mkdir -p "$LOG" /tmp/mk-profile
status=0
sms=$(nvidia-smi --query-gpu=multiprocessor_count --format=csv,noheader 2>/dev/null | head -n 1)
[[ $sms =~ ^[0-9]+$ ]] || sms=132
t8=/tmp/mk-profile/$MODEL-t8.bin t64=/tmp/mk-profile/$MODEL-t64.bin
"$BIN/mkplan" "examples/$MODEL.yaml" -o "$t8" --sms "$sms" --max-tokens 8 -q || status=1
"$BIN/mkplan" "examples/$MODEL.yaml" -o "$t64" --sms "$sms" --max-tokens 64 -q || status=1

echo "--- trace: $MODEL, batch of 2 at context 512 (T = 8 schedule)"
timeout 120 "$BIN/mkbench" "$t8" --context 512 --batch 2 --reps 5 --trace "$LOG/rows-batch2" | tail -n 30 || status=1
echo "--- trace: $MODEL, prefill of 256 tokens, 64 rows a step"
timeout 120 "$BIN/mkbench" "$t64" --prefill 256 --reps 6 --trace "$LOG/rows-prefill" | tail -n 30 || status=1

NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
if [[ -z $NCU ]]; then
  echo "ncu: not found"
  exit $status
fi
profile() {  # name, mkbench arguments...
  local name=$1
  shift
  echo "--- ncu: $name"
  timeout 200 "$NCU" --clock-control none -k regex:interpreter_kernel --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section SourceCounters --import-source no -f -o "$LOG/$name" "$BIN/mkbench" "$@" > "$LOG/$name.ncu.log" 2>&1 ||
    { status=1; tail -n 20 "$LOG/$name.ncu.log"; return; }
  "$NCU" --import "$LOG/$name.ncu-rep" --print-details all > "$LOG/$name.details.txt" 2>&1
  grep -E "Duration|Memory Throughput|DRAM Throughput|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps" \
    "$LOG/$name.details.txt" | head -n 40
  # Per SASS instruction: its stall samples; the 25 hottest, with the CUDA line where the report has it.
  "$NCU" --import "$LOG/$name.ncu-rep" --page source --csv --print-source sass > "$LOG/$name.source.csv" 2>&1 || true
  python3 - "$LOG/$name.source.csv" <<'EOF' || true
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
head = next((i for i, r in enumerate(rows) if any("Sampl" in c for c in r)), None)
if head is None:
    print("source page: no sampling columns;", " ".join(open(sys.argv[1], errors="replace").read().split()[:40]))
    sys.exit()
h = rows[head]
col = next(i for i, c in enumerate(h) if "Warp Stall Sampling (All" in c or c.startswith("Warp Stall Sampling"))
src = next((i for i, c in enumerate(h) if c.lower() in ("source", "sass")), 1)
data = []
for r in rows[head + 1:]:
    try:
        data.append((float(r[col].replace(",", "")), r))
    except (ValueError, IndexError):
        pass
total = sum(d[0] for d in data) or 1
print(f"stall samples: {total:.0f}; hottest instructions:")
for v, r in sorted(data, key=lambda d: -d[0])[:25]:
    print(f"  {100 * v / total:5.1f} %  {r[0][:8]:8} {r[src][:110]}")
EOF
}
profile batch2 "$t8" --context 512 --batch 2 --reps 2
profile prefill "$t64" --prefill 256 --reps 1
exit $status
