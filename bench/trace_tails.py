#!/usr/bin/env python3
"""Where each op's tail comes from, from a Chrome trace of one step (mkbench --trace PREFIX writes
PREFIX.json; gzip-compressed files are read too). docs/notes.md entry 75.

For every op kind of the layer block (op names without their layer digits), averaged over the
layers: the tail (the last task's signal after the mean of its tasks' signals), split into how
late the slowest task became ready and how much longer than the mean it ran; then, per SM (a
trace lane: one block's queue), the run time averaged over the layers: its spread and the
correlation between the even and the odd layers (near 1: the same SMs are slow every layer, a deal by SM speed could take it back; near
0: the excess varies from one instance to the next).
Usage: trace_tails.py TRACE.json[.gz]
"""
import collections
import gzip
import json
import statistics as st
import sys


def kind(op):  # the op's name without its layer digits
    return "".join(c for c in op if not c.isdigit())


def layer(op):
    return int("".join(c for c in op if c.isdigit()) or 0)


def corr(x, y):
    mx, my = st.mean(x), st.mean(y)
    sx = sum((a - mx) ** 2 for a in x) ** 0.5
    sy = sum((b - my) ** 2 for b in y) ** 0.5
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / (sx * sy) if sx and sy else float("nan")


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    path = sys.argv[1]
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        events = json.load(f)["traceEvents"]
    run = collections.defaultdict(dict)  # op -> sm -> (ready, end) in us
    for e in events:
        if e.get("ph") == "X" and e.get("cat") != "wait":
            run[e["args"]["op"]][e["tid"]] = (e["ts"], e["ts"] + e["dur"])
    by_kind = collections.defaultdict(list)
    for op in run:
        by_kind[kind(op)].append(op)
    print("op kind: layers; tail = last signal - mean signal; the slowest task's ready lag and run excess over the op's means; "
          "per SM over the layers: run sd, slowest SM over the mean, even/odd-layer correlation (us)")
    for k, ops in by_kind.items():
        tail = lag = excess = 0.0
        for op in ops:
            tasks = list(run[op].values())
            ready = [t[0] for t in tasks]
            end = [t[1] for t in tasks]
            dur = [t[1] - t[0] for t in tasks]
            i = max(range(len(end)), key=lambda j: end[j])
            tail += max(end) - st.mean(end)
            lag += ready[i] - st.mean(ready)
            excess += dur[i] - st.mean(dur)
        n = len(ops)
        line = f"  {k:12s} {n:3d}: tail {tail / n:5.2f}, ready lag {lag / n:5.2f}, run excess {excess / n:5.2f}"
        sms = sorted(set.intersection(*(set(run[op]) for op in ops)))
        if n >= 2 and len(sms) >= 3:
            ordered = sorted(ops, key=layer)
            mean_run = lambda s, sel: st.mean(run[o][s][1] - run[o][s][0] for o in sel)
            per = [mean_run(s, ordered) for s in sms]
            even = [mean_run(s, ordered[0::2]) for s in sms]
            odd = [mean_run(s, ordered[1::2]) for s in sms]
            line += f"; per SM: sd {st.pstdev(per):5.2f}, slowest {max(per) - st.mean(per):5.2f}, even/odd {corr(even, odd):5.2f}"
        print(line)


if __name__ == "__main__":
    main()
