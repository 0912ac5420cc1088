#!/usr/bin/env python3
"""Writes bench/RESULTS.md's table from one scripts/gpu_check.sh log.

Reads the log (mkbench medians, torch baselines, mkrun decode timings, the GPU line) and prints
Markdown: per workload the megakernel's µs/token (mkbench, and mkrun where measured), the
bandwidth floor and its percentage, and the ratio to each baseline measured in the same run.
Usage: bench/results.py LOG [--commit C] > table.md
"""
import argparse, re, sys

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("log")
ap.add_argument("--commit", default="?")
a = ap.parse_args()
text = open(a.log, encoding="utf-8", errors="replace").read()

bench, floor, baseline, mkrun = {}, {}, {}, {}
for m in re.finditer(r"\[(\S+), (\S+), context (\d+)\]\n(.*?)step \(median of \d+[^)]*\): ([\d.e+]+) us", text, re.S):
    model, policy, ctx, body, us = m.groups()
    if policy == "round-robin":  # a float8 variant NAME/f8-LAYOUT is planned as NAME-f8-LAYOUT
        bench[(model.replace("/", "-"), int(ctx))] = float(us)
for m in re.finditer(r"(\S+\.bin) at context (\d+): .*?floor ([\d.e+]+) us", text):
    name = re.sub(r"-(round-robin|critical-path)\.bin$", "", m.group(1).split("/")[-1])
    floor[(name, int(m.group(2)))] = float(m.group(3))
for m in re.finditer(r"^baseline (\S+) (\d+) (\S+) (\d+)$", text, re.M):
    baseline.setdefault((m.group(1), int(m.group(2))), {})[m.group(3)] = float(m.group(4))
for m in re.finditer(r"=== mkrun timing: (\S+), (\d+)-token prompt.*?decode after the prompt: \d+ steps, ([\d.]+) us/token", text, re.S):
    mkrun[(m.group(1).rstrip(","), int(m.group(2)))] = float(m.group(3))
gpu = re.search(r"^(NVIDIA [^\n]*)$", text, re.M)
date = re.search(r"^\w{3} \w{3} +\d+ [\d:]+ (AM |PM )?UTC \d{4}$", text, re.M)

names = {"eager": "PyTorch eager", "graph": "PyTorch + CUDA graph", "compile": "torch.compile max-autotune + graph"}
print(f"GPU: {gpu.group(1) if gpu else '?'} (name, memory, SM clock now, max SM clock, memory clock); "
      f"date: {date.group(0) if date else '?'}; commit: {a.commit}\n")
print("| model, context | megakernel (mkbench) | % of floor | mkrun decode | floor | "
      + " | ".join(names.values()) + " |")
print("|---|---|---|---|---|" + "---|" * len(names))
for key in sorted(bench, key=lambda k: (k[0], k[1])):
    us, fl = bench[key], floor.get(key)
    run = next((v for (m, ctx), v in mkrun.items() if m == key[0] and abs(ctx - key[1]) <= 128), None)
    cells = [f"{key[0]}, {key[1]}", f"**{us:.0f} µs**", f"{fl / us * 100:.0f} %" if fl else "",
             f"{run:.0f} µs" if run else "", f"{fl:.0f} µs" if fl else ""]
    for v in names:
        b = baseline.get(key, {}).get(v)
        cells.append(f"{b:.0f} µs ({b / us:.2f}x)" if b else "")
    print("| " + " | ".join(cells) + " |")
print("\nRatios in parentheses: the baseline's time over the megakernel's (above 1: the megakernel is faster).")
