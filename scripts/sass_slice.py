#!/usr/bin/env python3
"""Prints the SASS of one out-of-line function of a kernel.

cuobjdump -sass prints a kernel's callees (the op bodies the interpreter calls out of line) inside
the kernel's listing with no header of their own; the cubin's symbol table has their offsets.
Usage: sass_slice.py CUBIN SASS_LISTING NAME_PART  (the listing from `cuobjdump -sass`).
"""
import re
import subprocess
import sys


def function_range(cubin, name_part):
    out = subprocess.run(["readelf", "-sW", cubin], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and f[3] == "FUNC" and name_part in f[7]:
            start, size = int(f[1], 16), int(f[2], 0)
            return start, start + size
    raise SystemExit(f"sass_slice: no function named like '{name_part}' in {cubin}")


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    start, end = function_range(sys.argv[1], sys.argv[3])
    at = re.compile(r"/\*([0-9a-f]{4,})\*/")
    for line in open(sys.argv[2]):
        m = at.search(line)
        if m and start <= int(m.group(1), 16) < end:
            print(line.rstrip())


if __name__ == "__main__":
    main()
