#!/usr/bin/env python3
"""PyTorch baselines for the benchmark: one batch-1 decode step of a Llama / Qwen3 shaped model
(random bf16 weights, a KV cache filled to `--context`), timed as plain eager PyTorch, as a
replayed CUDA graph of the eager step, and as torch.compile(mode="max-autotune-no-cudagraphs")
replayed as one CUDA graph. The shapes come from an example YAML's config. Prints one line per variant:
    baseline MODEL CONTEXT VARIANT MEDIAN_US
Times are CUDA-event medians over `--steps` steps after warm-up, the step's token fed back from
its own argmax on the device, as the megakernel does.
"""
import argparse, statistics, sys

import torch
import torch.nn.functional as F
import yaml

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("example", help="examples/NAME.yaml")
ap.add_argument("--context", type=int, default=512)
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--variants", default="eager,graph,compile")
a = ap.parse_args()

with open(a.example) as f:
    doc = yaml.safe_load(f)
cfg, name = doc["config"], doc["model"]
H, I, NH, NKV, HD, V, L = (cfg[k] for k in ("hidden", "inter", "heads", "kv_heads", "head_dim", "vocab", "layers"))
eps, qk_norm = float(cfg["eps"]), "q_norm" in yaml.safe_dump(doc["ops"])
theta = float(cfg.get("rope", {}).get("theta", 10000))
dev, bf = "cuda", torch.bfloat16
torch.manual_seed(0)


def w(*shape):
    return (torch.randn(*shape, device=dev, dtype=torch.float32) / shape[-1] ** 0.5).to(bf)


layers = [dict(attn_norm=1 + 0.1 * torch.randn(H, device=dev).to(bf), wqkv=w((NH + 2 * NKV) * HD, H), wo=w(H, NH * HD),
               mlp_norm=1 + 0.1 * torch.randn(H, device=dev).to(bf), wgu=w(2 * I, H), wd=w(H, I),
               qn=torch.ones(HD, device=dev, dtype=bf), kn=torch.ones(HD, device=dev, dtype=bf)) for _ in range(L)]
embed, final_norm = w(V, H), torch.ones(H, device=dev, dtype=bf)
lm_head = embed if cfg.get("tie_embeddings", 0) else w(V, H)
T = a.context + a.steps + 16
kcache = [torch.randn(1, NKV, T, HD, device=dev, dtype=bf) for _ in range(L)]
vcache = [torch.randn(1, NKV, T, HD, device=dev, dtype=bf) for _ in range(L)]
inv_freq = 1.0 / theta ** (torch.arange(0, HD, 2, device=dev, dtype=torch.float32) / HD)


def rms(x, weight):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(bf) * weight


def rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def step(token, pos):
    """token: int64 [1], pos: int64 [1] (device tensors); returns the greedy next token."""
    x = embed[token]  # [1, H]
    mask = (torch.arange(T, device=dev) <= pos).view(1, 1, 1, T)
    ang = pos.float() * inv_freq
    cos, sin = torch.cat([ang.cos(), ang.cos()]).to(bf), torch.cat([ang.sin(), ang.sin()]).to(bf)
    for li, l in enumerate(layers):
        qkv = F.linear(rms(x, l["attn_norm"]), l["wqkv"])
        q, k, v = qkv.split([NH * HD, NKV * HD, NKV * HD], -1)
        q, k, v = q.view(1, NH, 1, HD), k.view(1, NKV, 1, HD), v.view(1, NKV, 1, HD)
        if qk_norm:
            q, k = rms(q, l["qn"]), rms(k, l["kn"])
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        kcache[li].index_copy_(2, pos, k)
        vcache[li].index_copy_(2, pos, v)
        o = F.scaled_dot_product_attention(q, kcache[li], vcache[li], attn_mask=mask, enable_gqa=True)
        x = x + F.linear(o.reshape(1, NH * HD), l["wo"])
        gu = F.linear(rms(x, l["mlp_norm"]), l["wgu"])
        g, u = gu.chunk(2, -1)
        x = x + F.linear(F.silu(g) * u, l["wd"])
    logits = F.linear(rms(x, final_norm), lm_head)
    return logits.argmax(-1)


def timed(fn, token, pos):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for i in range(a.steps + 5):
        pos.fill_(a.context + (i % 8))
        start.record()
        fn(token, pos)
        end.record()
        torch.cuda.synchronize()
        if i >= 5:
            out.append(start.elapsed_time(end) * 1e3)
    return statistics.median(out)


token, pos = torch.tensor([17], device=dev), torch.tensor([a.context], device=dev)
with torch.no_grad():
    for variant in a.variants.split(","):
        if variant == "eager":
            us = timed(lambda t, p: t.copy_(step(t, p)), token, pos)
        elif variant in ("graph", "compile"):
            # compile: max-autotune kernels (Inductor's own graphs off), then one CUDA graph of
            # the whole step, as for the eager step.
            fn = step if variant == "graph" else torch.compile(step, mode="max-autotune-no-cudagraphs", fullgraph=True)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    token.copy_(fn(token, pos))
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                token.copy_(fn(token, pos))
            us = timed(lambda t, p: g.replay(), token, pos)
        else:
            sys.exit(f"unknown variant {variant}")
        print(f"baseline {name} {a.context} {variant} {us:.0f}", flush=True)
