#!/usr/bin/env python3
"""A layer's chain of ops, from a Chrome trace of one step (mkbench --trace PREFIX writes
PREFIX.json; gzip-compressed files are read too). bench/NOTES.md entry 86.

For each op kind of the layer block (op names without their layer digits), in the order the
ops start, averaged over the middle layers (the first two and the last two left out): its hop
(its first task's start after the last end of the op that started before it; negative where it
started before that op ended, as a task that waits for nothing does), its span (first start to
last end, the end being the signal) and its tasks' median run; then the mean time from one
layer's first start to the next.
Usage: trace_chain.py TRACE.json[.gz]
"""
import collections
import statistics as st
import sys

from trace_tails import kind, read_runs


def layer(op):  # -1 for the ops outside the layer block
    digits = "".join(c for c in op if c.isdigit())
    return int(digits) if digits else -1


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    first, last, runs = {}, {}, collections.defaultdict(list)
    for op, _, start, end in read_runs(sys.argv[1]):
        first[op] = min(first.get(op, float("inf")), start)
        last[op] = max(last.get(op, float("-inf")), end)
        runs[op].append(end - start)
    layers = sorted({layer(op) for op in first if layer(op) >= 0})
    middle = layers[2:-2]
    if not middle:
        raise SystemExit("too few layers in the trace")
    kinds = collections.OrderedDict()
    starts = []
    for l in middle:
        ops = sorted((op for op in first if layer(op) == l), key=lambda op: first[op])
        starts.append(first[ops[0]])
        for i, op in enumerate(ops):
            d = kinds.setdefault(kind(op), {"hop": [], "span": [], "run": []})
            if i:
                d["hop"].append(first[op] - last[ops[i - 1]])
            d["span"].append(last[op] - first[op])
            d["run"].append(st.median(runs[op]))
    for k, d in kinds.items():
        hop = st.mean(d["hop"]) if d["hop"] else 0.0
        print(f"  {k:12s} hop {hop:6.2f}  span {st.mean(d['span']):6.2f}  median run {st.mean(d['run']):6.2f}")
    if len(starts) > 1:
        print(f"  layer: {(starts[-1] - starts[0]) / (len(starts) - 1):.2f} us")


if __name__ == "__main__":
    main()
