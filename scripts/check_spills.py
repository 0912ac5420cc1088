#!/usr/bin/env python3
"""Compiles the CUDA interpreter (device/cuda/interpreter.cu) as BUILD compiles it, with ptxas's
report (-Xptxas -v), and checks every function's register spills against scripts/spill_budget.txt:
exit 1, naming each function over its budget, else print the spills. Usage: check_spills.py BUILD"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def budget():
    rules = []
    with open(os.path.join(ROOT, "scripts", "spill_budget.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if line:
                rules.append((line[0], int(line[1]), int(line[2])))
    return rules


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = sys.argv[1]
    commands = json.load(open(os.path.join(build, "compile_commands.json")))
    entry = next((e for e in commands if e["file"].endswith("device/cuda/interpreter.cu")), None)
    if entry is None:
        sys.exit(f"check_spills: {build} does not compile device/cuda/interpreter.cu (configured without CUDA?)")
    args = shlex.split(entry["command"])
    out = args.index("-o")
    with tempfile.TemporaryDirectory() as tmp:
        args[out + 1] = os.path.join(tmp, "interpreter.o")
        run = subprocess.run(args + ["-Xptxas", "-v"], cwd=entry["directory"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("check_spills: the compile failed:\n" + run.stderr[-3000:])
    # Each kernel's functions are reported after it ("Compiling entry function K"): a body is
    # checked as it is in each kernel instance, named "BODY@kernel<ARGS>" (no spaces, as a budget rule).
    spills = {}  # (mangled kernel, mangled name) -> (stores, loads)
    kernel = name = None
    for line in run.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            kernel = m.group(1)
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name:
            spills[(kernel, name)] = (int(m.group(1)), int(m.group(2)))
            name = None
    if not spills:
        sys.exit("check_spills: ptxas reported no function")
    mangled = sorted({k for key in spills for k in key if k})
    demangled = dict(zip(mangled, subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True,
                                                  text=True).stdout.splitlines()))

    def readable_name(kernel, name):
        text = re.sub(r"_INTERNAL_\w+::|\(anonymous namespace\)::", "", demangled[name]).split("(")[0].replace(", ", ",")
        if name == kernel or not kernel:
            return text
        args = re.search(r"<.*>", re.sub(r"\(anonymous namespace\)::", "", demangled[kernel]).split("(")[0])
        return f"{text}@kernel{args.group(0).replace(', ', ',') if args else ''}"

    rules, over = budget(), []
    for (kernel, name), (stores, loads) in spills.items():
        readable = readable_name(kernel, name)
        rule = next(r for r in rules if r[0] == "*" or r[0] in readable)
        short = readable
        line = f"{short}: {stores} bytes of spill stores, {loads} of loads (budget {rule[1]} / {rule[2]})"
        if stores > rule[1] or loads > rule[2]:
            over.append(line)
        elif stores or loads:
            print("check_spills: " + line)
    for line in over:
        print("check_spills: OVER BUDGET: " + line)
    if over:
        print("check_spills: the kernel spills more than scripts/spill_budget.txt allows; find why, or raise the budget "
              "and say why in docs/notes.md")
        sys.exit(1)
    print(f"check_spills: {len(spills)} functions within scripts/spill_budget.txt")


if __name__ == "__main__":
    main()
