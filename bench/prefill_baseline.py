#!/usr/bin/env python3
"""The prefill baseline: one Hugging Face transformers forward pass over a prompt (random bf16
weights of an example's shape, attention by SDPA), the time to the first token that mkbench
--prefill and mkrun's chunked prompts are compared with. Prints one line per variant:
    prefill MODEL PROMPT VARIANT MEDIAN_MS
Variants: last (logits of the last position only, as generate() prefills: logits_to_keep=1) and
all (every position's logits, a plain forward). CUDA-event medians over --reps after warm-up.
"""
import argparse, statistics

import torch
import yaml

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("example", help="examples/NAME.yaml")
ap.add_argument("--prompt", type=int, default=2048)
ap.add_argument("--reps", type=int, default=10)
a = ap.parse_args()

import transformers as tf

with open(a.example) as f:
    doc = yaml.safe_load(f)
cfg, name = doc["config"], doc["model"]
qwen = "q_norm" in yaml.safe_dump(doc["ops"])
rope = cfg.get("rope", {})
params = {"rope_type": "default", "rope_theta": float(rope.get("theta", 10000))}
if rope.get("scaling") == "llama3":
    params.update(rope_type="llama3", factor=float(rope["factor"]), low_freq_factor=float(rope["low_freq_factor"]),
                  high_freq_factor=float(rope["high_freq_factor"]),
                  original_max_position_embeddings=int(rope["original_max_position"]))
cls_cfg, cls_model = (tf.Qwen3Config, tf.Qwen3ForCausalLM) if qwen else (tf.LlamaConfig, tf.LlamaForCausalLM)
config = cls_cfg(hidden_size=cfg["hidden"], intermediate_size=cfg["inter"], num_hidden_layers=cfg["layers"],
                 num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"], head_dim=cfg["head_dim"],
                 vocab_size=cfg["vocab"], rms_norm_eps=float(cfg["eps"]), tie_word_embeddings=bool(cfg.get("tie_embeddings", 0)),
                 max_position_embeddings=131072, attention_bias=False, rope_parameters=params)
config._attn_implementation = "sdpa"
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = cls_model(config).eval()
torch.manual_seed(0)
ids = torch.randint(0, cfg["vocab"], (1, a.prompt), device="cuda")
for variant, keep in (("last", 1), ("all", 0)):
    times = []
    with torch.no_grad():
        for i in range(a.reps + 3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(ids, logits_to_keep=keep, use_cache=True)
            end.record()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(start.elapsed_time(end))
    print(f"prefill {name} {a.prompt} {variant} {statistics.median(times):.2f}", flush=True)
