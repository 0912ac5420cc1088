#!/usr/bin/env python3
"""Writes an example model's YAML with its seven per-layer projections (wq wk wv wo wg wu wd)
declared float8: `dtype: f8e4m3, scale: {key: "<weight key>_scale", layout: LAYOUT}`; the
embeddings, norms and LM head stay bf16. The float8 rows of bench/run.sh and
tests/gpu/hf_compare.py --fp8 plan what it writes. Usage: float8_yaml.py EXAMPLE.yaml LAYOUT > OUT.yaml
(LAYOUT: tensor, row or block128)."""
import re
import sys

PROJECTION = re.compile(r'(w[qkvogud]\{layer\}): \{key: "([^"]+)", shape: (\[[^\]]+\])\}')
PROJECTIONS = 7


def float8_yaml(text, layout):
    """The YAML text with the projections float8; exits naming what it found when not all seven."""
    if layout not in ("tensor", "row", "block128"):
        sys.exit(f"float8_yaml: layout {layout!r}; expected tensor, row or block128")
    out, n = PROJECTION.subn(
        lambda m: f'{m[1]}: {{key: "{m[2]}", shape: {m[3]}, dtype: f8e4m3, scale: {{key: "{m[2]}_scale", layout: {layout}}}}}',
        text)
    if n != PROJECTIONS:
        sys.exit(f"float8_yaml: found {n} projection declarations to make float8, expected {PROJECTIONS} "
                 "(wq/wk/wv/wo/wg/wu/wd{layer}: {key: \"...\", shape: [...]})")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        sys.stdout.write(float8_yaml(f.read(), sys.argv[2]))
