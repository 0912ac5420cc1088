#!/usr/bin/env python3
"""Where a profiled kernel's warps spend their time, by function and by instruction.

Reads Nsight Compute's per-instruction source page (`ncu -i REP --page source --csv
--print-source sass`, plain or gzipped) and, for each out-of-line function, its SASS listing as
scripts/sass_slice.py writes it (offsets from the kernel's start). Prints each function's share
of the warp-state samples with its top stall reasons, then its hottest instructions.

  scripts/ncu_hotspots.py ncu-source.csv matvec_body=matvec_body.sass [attention_body=...] [--top N]

Samples outside every named function count to the kernel (its own loop and inlined code, the
producer warp's included).
"""
import argparse
import csv
import gzip
import re
import sys

OFFSET = re.compile(r"/\*([0-9a-f]{4,})\*/")


def slice_range(path):
    """The first and last instruction offsets of a SASS slice."""
    offsets = [int(m.group(1), 16) for line in open(path) if (m := OFFSET.search(line))]
    if not offsets:
        sys.exit(f"{path}: no instruction offsets (expected cuobjdump -sass lines with /*offset*/)")
    return min(offsets), max(offsets)


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if header is None:
        sys.exit(f"{path}: no header row with Address and Source (expected ncu --page source --csv)")
    return rows[header], [r for r in rows[header + 1:] if len(r) == len(rows[header])]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source_csv", help="ncu --page source --csv --print-source sass output (.csv or .csv.gz)")
    ap.add_argument("functions", nargs="*", help="NAME=SASS_SLICE for each out-of-line function")
    ap.add_argument("--top", type=int, default=12, help="hottest instructions listed per function (default 12)")
    args = ap.parse_args()

    header, rows = read_rows(args.source_csv)
    col = {name: header.index(name) for name in ("Address", "Source", "Warp Stall Sampling (All Samples)",
                                                "Instructions Executed")}
    stalls = [(h[len("stall_"):], i) for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    ranges = []
    for spec in args.functions:
        name, _, path = spec.partition("=")
        if not path:
            sys.exit(f"{spec}: expected NAME=SASS_SLICE")
        ranges.append((name, *slice_range(path)))
    base = int(rows[0][col["Address"]], 16)

    def number(r, i):
        return int(r[i]) if r[i] not in ("", "-") else 0

    sampled = col["Warp Stall Sampling (All Samples)"]
    groups = {}
    for r in rows:
        off = int(r[col["Address"]], 16) - base
        name = next((n for n, lo, hi in ranges if lo <= off <= hi), "kernel")
        groups.setdefault(name, []).append((off, r))
    samples = {name: sum(number(r, sampled) for _, r in members) for name, members in groups.items()}
    total = sum(samples.values()) or 1
    print(f"{total} warp samples in all")
    for name, members in sorted(groups.items(), key=lambda g: -samples[g[0]]):
        reasons = sorted(((s, sum(number(r, i) for _, r in members)) for s, i in stalls), key=lambda x: -x[1])[:5]
        print(f"\n{name}: {samples[name]} samples, {100 * samples[name] / total:.1f} % of all; stalls: " +
              ", ".join(f"{s} {100 * n / max(samples[name], 1):.0f} %" for s, n in reasons))
        for off, r in sorted(members, key=lambda m: -number(m[1], sampled))[:args.top]:
            n = number(r, sampled)
            why = max(stalls, key=lambda s: number(r, s[1]))[0]
            print(f"  {off:6x} {100 * n / total:5.1f} %  executed {number(r, col['Instructions Executed']):>10}  "
                  f"{why:<16} {r[col['Source']].strip()[:70]}")


if __name__ == "__main__":
    main()
