#!/usr/bin/env python3
"""Baseline for the benchmark: transformers in bf16, eager, batch-1 greedy decode.

Loads a checkpoint folder (the ones tests/gpu/hf_compare.py writes), prefills `--context`
random tokens in one forward pass, then times `--steps` single-token decode steps (synchronised
wall time per step) and prints the median. Same GPU, same weights, same context as mkrun.
"""
import argparse, statistics, time

import torch
from transformers import AutoModelForCausalLM

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("ckpt")
ap.add_argument("--context", type=int, default=512)
ap.add_argument("--steps", type=int, default=64)
a = ap.parse_args()

model = AutoModelForCausalLM.from_pretrained(a.ckpt, dtype=torch.bfloat16).cuda().eval()
g = torch.Generator().manual_seed(1)
ids = torch.randint(1000, model.config.vocab_size, (1, a.context), generator=g).cuda()
times = []
with torch.no_grad():
    out = model(ids, use_cache=True)
    cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = model(token, past_key_values=cache, use_cache=True)
        cache, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
print(f"transformers eager bf16, {a.ckpt}: context {a.context}..{a.context + a.steps}, "
      f"median {statistics.median(times) * 1e6:.0f} us/token over {a.steps} steps")
