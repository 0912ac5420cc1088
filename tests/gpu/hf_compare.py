#!/usr/bin/env python3
"""Compare mkrun on the GPU with Hugging Face transformers, by teacher forcing.

Builds a transformers model with random weights of an example's shape (no download), saves it
as a bf16 checkpoint, plans the example with mkplan, runs mkrun --dump-logits over a random
prompt plus a greedy continuation, then runs the same token sequence through transformers in
float32 (the same bf16 weights, upcast) and in bf16. Per step, our logits must be no further
from float32 than transformers' own bf16 pass is, and our top-1 token must equal float32's
wherever float32's top-1/top-2 gap exceeds 0.1. Exit status 1 on any failure.
"""
import argparse, json, math, os, subprocess, sys, time

import numpy as np
import torch
import yaml


def load_config(example):
    with open(example) as f:
        return yaml.safe_load(f)["config"]


def hf_model(cfg, qwen):
    import transformers as tf
    common = dict(hidden_size=cfg["hidden"], intermediate_size=cfg["inter"],
                  num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
                  num_key_value_heads=cfg["kv_heads"], head_dim=cfg["head_dim"],
                  vocab_size=cfg["vocab"], rms_norm_eps=float(cfg["eps"]),
                  tie_word_embeddings=bool(cfg.get("tie_embeddings", 0)),
                  max_position_embeddings=131072, attention_bias=False)
    rope = cfg.get("rope", {})
    params = {"rope_type": "default", "rope_theta": float(rope.get("theta", 10000))}
    if rope.get("scaling") == "llama3":
        params.update(rope_type="llama3", factor=float(rope["factor"]),
                      low_freq_factor=float(rope["low_freq_factor"]),
                      high_freq_factor=float(rope["high_freq_factor"]),
                      original_max_position_embeddings=int(rope["original_max_position"]))
    cls_cfg, cls_model = (tf.Qwen3Config, tf.Qwen3ForCausalLM) if qwen else (tf.LlamaConfig, tf.LlamaForCausalLM)
    try:
        config = cls_cfg(**common, rope_parameters=params)
    except TypeError:
        legacy = {k: v for k, v in params.items() if k != "rope_theta"}
        config = cls_cfg(**common, rope_theta=params["rope_theta"],
                         rope_scaling=None if params["rope_type"] == "default" else legacy)
    config._attn_implementation = "eager"
    return config, cls_model


def expected_inv_freq(cfg):
    rope, hd = cfg.get("rope", {}), cfg["head_dim"]
    inv = [float(rope.get("theta", 10000)) ** (-2.0 * i / hd) for i in range(hd // 2)]
    if rope.get("scaling") == "llama3":
        orig, factor = rope["original_max_position"], rope["factor"]
        low, high = rope["low_freq_factor"], rope["high_freq_factor"]
        out = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen > orig / low:
                f = f / factor
            elif wavelen >= orig / high:
                s = (orig / wavelen - low) / (high - low)
                f = (1 - s) * f / factor + s * f
            out.append(f)
        inv = out
    return torch.tensor(inv, dtype=torch.float64)


def rel(a, b):
    return float(torch.linalg.norm((a - b).double()) / torch.linalg.norm(b.double()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--example", required=True, help="examples/<name>.yaml")
    ap.add_argument("--bin", required=True, help="folder with mkplan and mkrun")
    ap.add_argument("--work", required=True, help="scratch folder for the checkpoint and outputs")
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=33, help="greedy tokens (at least 32 steps of continuation)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    cfg = load_config(a.example)
    name = os.path.basename(a.example)[:-5]
    qwen = bool(cfg.get("qk_norm", 0))
    os.makedirs(a.work, exist_ok=True)
    ckpt = os.path.join(a.work, "ckpt")
    config, cls = hf_model(cfg, qwen)
    t0 = time.time()
    with torch.device("cuda"):
        model = cls(config).eval()
    rotary = getattr(model.model, "rotary_emb", None)
    if rotary is None or not hasattr(rotary, "inv_freq"):
        sys.exit(f"{name}: cannot read transformers' RoPE frequencies to check the rope config")
    if not torch.allclose(rotary.inv_freq.double().cpu(), expected_inv_freq(cfg), rtol=1e-5):
        sys.exit(f"{name}: transformers' RoPE frequencies differ from the YAML's rope config")
    model.to(torch.bfloat16)
    model.save_pretrained(ckpt)
    print(f"{name}: built and saved a random {sum(p.numel() for p in model.parameters())/1e9:.2f}B-parameter "
          f"checkpoint in {time.time()-t0:.1f} s", flush=True)

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sched = os.path.join(a.work, "sched.bin")
    subprocess.run([os.path.join(a.bin, "mkplan"), a.example, "-o", sched, "--sms", str(sms)], check=True)
    g = torch.Generator().manual_seed(a.seed + 1)
    prompt = torch.randint(0, cfg["vocab"], (a.prompt,), generator=g).tolist()
    npy = os.path.join(a.work, "logits.npy")
    steps = a.prompt + a.tokens - 1
    run = subprocess.run([os.path.join(a.bin, "mkrun"), sched, ckpt, "--backend", "cuda",
                          "--prompt-ids", ",".join(map(str, prompt)), "--tokens", str(a.tokens),
                          "--dump-logits", npy], check=True, capture_output=True, text=True)
    print(run.stdout, end="", flush=True)
    generated = [int(t) for t in run.stdout.split("tokens:")[1].split("\n")[0].split()]
    ours = torch.from_numpy(np.load(npy)).cuda()
    seq = torch.tensor([prompt + generated[:-1]], device="cuda")
    assert ours.shape == (steps, cfg["vocab"]) and seq.shape[1] == steps

    with torch.no_grad():
        bf16 = model(seq).logits[0].float()
        model.float()
        if hasattr(rotary, "original_inv_freq"):  # the bf16 cast rounded the RoPE buffer too
            rotary.inv_freq = rotary.original_inv_freq.to(rotary.inv_freq.device, torch.float32)
        else:
            rotary.inv_freq = expected_inv_freq(cfg).float().cuda()
        f32 = model(seq).logits[0].float()
    ok = True
    worst, worst_bf16, agree, gapped = 0.0, 0.0, 0, 0
    for t in range(steps):
        e_ours, e_bf16 = rel(ours[t], f32[t]), rel(bf16[t], f32[t])
        worst, worst_bf16 = max(worst, e_ours), max(worst_bf16, e_bf16)
        if e_ours > e_bf16:
            ok = False
            print(f"  step {t}: our error {e_ours:.3e} exceeds transformers bf16's {e_bf16:.3e}")
        top2 = torch.topk(f32[t], 2)
        if float(top2.values[0] - top2.values[1]) > 0.1:
            gapped += 1
            if int(torch.argmax(ours[t])) == int(top2.indices[0]):
                agree += 1
            else:
                ok = False
                print(f"  step {t}: top-1 {int(torch.argmax(ours[t]))} differs from float32's {int(top2.indices[0])}")
    print(f"{name}: {steps} steps teacher-forced; logit error vs float32: ours max {worst:.2e}, "
          f"transformers bf16 max {worst_bf16:.2e}; top-1 equal on {agree}/{gapped} steps with a gap > 0.1: "
          f"{'PASS' if ok else 'FAIL'}", flush=True)
    with open(os.path.join(a.work, "summary.json"), "w") as f:
        json.dump(dict(model=name, steps=steps, worst=worst, worst_bf16=worst_bf16, agree=agree, gapped=gapped, ok=ok), f)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
