#!/usr/bin/env python3
"""Compare mkrun on the GPU with Hugging Face transformers, by teacher forcing.

Builds a transformers model with random weights of an example's shape (no download), saves it
as a bf16 checkpoint, plans the example with mkplan, runs mkrun --dump-logits over a random
prompt plus a greedy continuation, then runs the same token sequence through transformers in
float32 (the same bf16 weights, upcast) and in bf16. Per step, our logits must be no further
from float32 than transformers' own bf16 pass is, and our top-1 token must equal float32's
wherever float32's top-1/top-2 gap exceeds 0.1. Exit status 1 on any failure.

With --max-tokens T the schedule is planned for T tokens a step, so mkrun prefills the prompt in
chunks of T. With --batch B, B prompts of different lengths (--prompt, --prompt + 5, ...) decode
together (mkrun --batch, one KV-cache slot each, a schedule of at least B tokens a step), and each
sequence is compared with its own transformers run.

With --family and --shape (or --config FILE) instead of --example, the model comes from a Hugging
Face config (a real model's shape, layers cut to --layers), and mkplan plans the saved checkpoint
folder straight from its config.json: no YAML. Norm weights are then drawn around 1 (and biases
around 0) instead of transformers' ones and zeros, so that a misplaced norm or bias shows.

With --fp8 LAYOUT (tensor, row or block128), the seven projections of every layer (q, k, v, o,
gate, up, down) are quantized to float8 e4m3 with f32 scales of that layout (amax / 448 over the
whole tensor, each row, or each 128 x 128 block) and stored so in the checkpoint; embeddings,
norms and the LM head stay bf16. With --example, mkplan gets the example's YAML with those
projections declared f8e4m3 (scales under "<key>_scale"); without, the saved config.json gets a
quantization_config (compressed-tensors for tensor and row, transformers' fp8 for block128) and
the scales are stored as those checkpoints store them. The model that transformers runs is the
dequantized one (float8 value times scale): its float32 pass, the reference, uses those weights
exactly, its bf16 pass them rounded to bf16. The comparison thus checks our float8 matvecs against
the exact dequantized arithmetic, not the quantization error itself (both sides share it).
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


# Real models' shapes, as their config.json on the Hub gives them (Hub field names). Mistral and
# Qwen2 give no head_dim (hidden / heads).
SHAPES = {
    "llama-3.2-3b": dict(family="llama", hidden_size=3072, intermediate_size=8192, num_attention_heads=24,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, num_hidden_layers=28,
                         rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
                         rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                           original_max_position_embeddings=8192)),
    "qwen2.5-1.5b": dict(family="qwen2", hidden_size=1536, intermediate_size=8960, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, num_hidden_layers=28, rms_norm_eps=1e-6,
                         rope_theta=1000000.0, tie_word_embeddings=True),
    "mistral-7b": dict(family="mistral", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                       num_key_value_heads=8, vocab_size=32768, num_hidden_layers=32, rms_norm_eps=1e-5,
                       rope_theta=1000000.0, tie_word_embeddings=False),
    "qwen3-8b": dict(family="qwen3", hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, num_hidden_layers=36, rms_norm_eps=1e-6,
                     rope_theta=1000000.0, tie_word_embeddings=False),
}


def hf_model_from_config(hub):
    """transformers config and model class from a Hub-style config dict (with "family")."""
    import transformers as tf
    hub = dict(hub)
    family = hub.pop("family")
    classes = dict(llama=(tf.LlamaConfig, tf.LlamaForCausalLM), mistral=(tf.MistralConfig, tf.MistralForCausalLM),
                   qwen2=(tf.Qwen2Config, tf.Qwen2ForCausalLM), qwen3=(tf.Qwen3Config, tf.Qwen3ForCausalLM))
    cls_cfg, cls_model = classes[family]
    theta = float(hub.pop("rope_theta", 10000.0))
    scaling = hub.pop("rope_scaling", None)
    extra = dict(max_position_embeddings=131072, hidden_act="silu")
    if family == "mistral":
        extra["sliding_window"] = None  # Mistral-7B v0.3: no window
    if family in ("qwen2", "qwen3"):
        extra["use_sliding_window"] = False
    params = dict(scaling or {"rope_type": "default"}, rope_theta=theta)
    if int(tf.__version__.split(".")[0]) >= 5:  # rope_parameters; older versions keep unknown kwargs silently
        config = cls_cfg(**hub, **extra, rope_parameters=params)
    else:
        config = cls_cfg(**hub, **extra, rope_theta=theta, rope_scaling=scaling)
    config._attn_implementation = "eager"
    # The YAML-style view of it, for the RoPE check and the sizes below.
    cfg = dict(hidden=hub["hidden_size"], inter=hub["intermediate_size"], heads=hub["num_attention_heads"],
               kv_heads=hub["num_key_value_heads"],
               head_dim=hub.get("head_dim") or hub["hidden_size"] // hub["num_attention_heads"],
               vocab=hub["vocab_size"], layers=hub["num_hidden_layers"], eps=hub["rms_norm_eps"],
               tie_embeddings=int(hub.get("tie_word_embeddings", False)), rope=dict(theta=theta))
    if scaling and scaling.get("rope_type") == "llama3":
        cfg["rope"].update(scaling="llama3", factor=scaling["factor"], low_freq_factor=scaling["low_freq_factor"],
                           high_freq_factor=scaling["high_freq_factor"],
                           original_max_position=scaling["original_max_position_embeddings"])
    return config, cls_model, cfg


def perturb_norms_and_biases(model, seed):
    """transformers starts norms at ones and biases at zeros: a norm applied in the wrong place,
    or a bias left out, would not show. Draw them around those values instead."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))


# The projections that --fp8 quantizes, by module name after "model.layers.N.".
FP8_PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                   "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
FP8_MAX = 448.0  # the largest finite float8 e4m3 (fn) value
FP8_BLOCK = 128


def quantize_fp8(w, layout):
    """Float8 e4m3 weights of a float32 matrix and their f32 scales (amax / 448 over the whole tensor,
    each row, or each 128 x 128 block, partial blocks padded), and the dequantized matrix q * scale
    (float32) that the checkpoint then holds exactly. Scales: tensor [1], row [rows], block128
    [ceil(rows/128), ceil(cols/128)]."""
    w = w.detach().float()
    rows, cols = w.shape
    if layout == "tensor":
        amax = w.abs().amax().reshape(1)
    elif layout == "row":
        amax = w.abs().amax(dim=1)
    elif layout == "block128":
        rb, cb = -(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK)
        padded = torch.zeros(rb * FP8_BLOCK, cb * FP8_BLOCK, dtype=torch.float32, device=w.device)
        padded[:rows, :cols] = w.abs()
        amax = padded.view(rb, FP8_BLOCK, cb, FP8_BLOCK).amax(dim=(1, 3))
        del padded
    else:
        raise ValueError(f"unknown float8 scale layout {layout}")
    scale = amax / FP8_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # an all-zero extent: any scale will do
    if layout == "tensor":
        expanded = scale.reshape(1, 1)
    elif layout == "row":
        expanded = scale[:, None]
    else:
        expanded = scale.repeat_interleave(FP8_BLOCK, dim=0).repeat_interleave(FP8_BLOCK, dim=1)[:rows, :cols]
    q = (w / expanded).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    d = q.float() * expanded
    return q, scale.float().contiguous(), d


def quantize_model_fp8(model, layers, layout):
    """Quantizes the projections of every layer in place (their parameters become the dequantized
    float32 values). Returns {weight name: (float8 tensor, scales)} for the checkpoint and
    {weight name: dequantized float32} for the float32 reference."""
    stored, dequant = {}, {}
    with torch.no_grad():
        for layer in range(layers):
            for module in FP8_PROJECTIONS:
                key = f"model.layers.{layer}.{module}.weight"
                p = model.get_parameter(key)
                q, scale, d = quantize_fp8(p, layout)
                p.copy_(d)
                stored[key], dequant[key] = (q, scale), d
    return stored, dequant


def fp8_quantization_config(layout):
    """config.json's quantization_config that mkplan imports for the layout, as published checkpoints
    write it: compressed-tensors (per channel or per tensor) or transformers' fp8 (128 x 128 blocks)."""
    if layout == "block128":
        return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    return {"quant_method": "compressed-tensors", "format": "float-quantized",
            "config_groups": {"group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 8, "type": "float", "strategy": "channel" if layout == "row" else "tensor",
                            "symmetric": True, "dynamic": False},
                "input_activations": {"dynamic": True, "num_bits": 8, "type": "float", "strategy": "token",
                                      "symmetric": True}}},
            "ignore": ["lm_head"], "quantization_status": "compressed"}


def fp8_scale_entry(key, scale, layout, hub_style):
    """The checkpoint key and tensor of a weight's scales. An example's YAML reads "<key>_scale" as
    the plain layout shape; a config.json import reads them as published: compressed-tensors'
    weight_scale (per row stored [rows, 1]), fp8's weight_scale_inv (a multiplier)."""
    scale = scale.detach().float().cpu().contiguous()
    if not hub_style:
        return key + "_scale", scale
    if layout == "block128":
        return key + "_scale_inv", scale
    if layout == "row":
        return key + "_scale", scale.reshape(-1, 1).contiguous()
    return key + "_scale", scale.reshape(1).contiguous()


def write_fp8_checkpoint(ckpt, stored, layout, hub_style):
    """Rewrites the saved checkpoint (one model.safetensors or a sharded folder): each quantized
    weight becomes its float8 tensor, with its scales beside it (in the same shard). With
    hub_style, config.json gets the matching quantization_config."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file
    index_file = os.path.join(ckpt, "model.safetensors.index.json")
    index = None
    if os.path.exists(index_file):
        with open(index_file) as f:
            index = json.load(f)
        shards = sorted(set(index["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    found, total = set(), 0
    for shard in shards:
        path = os.path.join(ckpt, shard)
        with safe_open(path, framework="pt") as f:
            metadata = f.metadata()
        tensors = load_file(path)
        for key in [k for k in tensors if k in stored]:
            q, scale = stored[key]
            tensors[key] = q.detach().cpu().contiguous()
            scale_key, scale_tensor = fp8_scale_entry(key, scale, layout, hub_style)
            if scale_key in tensors:
                sys.exit(f"{path}: already holds {scale_key}")
            tensors[scale_key] = scale_tensor
            if index is not None:
                index["weight_map"][scale_key] = shard
            found.add(key)
        tensors = {k: v.contiguous() for k, v in tensors.items()}
        total += sum(v.numel() * v.element_size() for v in tensors.values())
        tmp = path + ".tmp"  # load_file's tensors may map the file: write beside it, then replace
        save_file(tensors, tmp, metadata=metadata)
        del tensors
        os.replace(tmp, path)
    missing = sorted(set(stored) - found)
    if missing:
        sys.exit(f"{ckpt}: the saved checkpoint lacks {len(missing)} projection weights to quantize, e.g. {missing[0]}")
    if index is not None:
        if "total_size" in index.get("metadata", {}):
            index["metadata"]["total_size"] = total
        with open(index_file, "w") as f:
            json.dump(index, f, indent=2, sort_keys=True)
    if hub_style:
        config_file = os.path.join(ckpt, "config.json")
        with open(config_file) as f:
            config = json.load(f)
        config["quantization_config"] = fp8_quantization_config(layout)
        with open(config_file, "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)


# An example's projection declarations, as bench/run.sh's sed rewrites them for float8.
def fp8_example_yaml(example, layout, out):
    """Writes the example's YAML with its seven projections float8 (scripts/float8_yaml.py) to `out`."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
    from float8_yaml import float8_yaml
    with open(example) as f:
        text = float8_yaml(f.read(), layout)
    with open(out, "w") as f:
        f.write(text)
    return out


def rel(a, b):
    return float(torch.linalg.norm((a - b).double()) / torch.linalg.norm(b.double()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--example", help="examples/<name>.yaml")
    src.add_argument("--shape", choices=sorted(SHAPES), help="a real model's shape, planned from its config.json")
    src.add_argument("--config", help="a Hub-style config dict as JSON (plus \"family\"), planned from config.json")
    ap.add_argument("--family", choices=["llama", "mistral", "qwen2", "qwen3"],
                    help="with --shape: checked against the shape's family; with --config: the family if it has none")
    ap.add_argument("--layers", type=int, default=4, help="with --shape/--config: layers kept (default 4, to keep it fast)")
    ap.add_argument("--bin", required=True, help="folder with mkplan and mkrun")
    ap.add_argument("--work", required=True, help="scratch folder for the checkpoint and outputs")
    ap.add_argument("--prompt", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=33, help="greedy tokens (at least 32 steps of continuation)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=1, help="plan for this many tokens a step: prompts prefilled in chunks")
    ap.add_argument("--batch", type=int, default=1, help="sequences decoded together, each compared with its own run")
    ap.add_argument("--fp8", choices=["tensor", "row", "block128"],
                    help="store the seven projections of every layer as float8 e4m3 with scales of this layout")
    a = ap.parse_args()
    if a.batch > 1 and a.max_tokens < a.batch:
        a.max_tokens = a.batch  # a batch decodes a row a sequence a step

    torch.manual_seed(a.seed)
    os.makedirs(a.work, exist_ok=True)
    ckpt = os.path.join(a.work, "ckpt")
    if a.example:
        cfg = load_config(a.example)
        name = os.path.basename(a.example)[:-5] + (f" fp8-{a.fp8}" if a.fp8 else "")
        config, cls = hf_model(cfg, bool(cfg.get("qk_norm", 0)))
    else:
        if a.shape:
            hub, name = dict(SHAPES[a.shape]), a.shape
            if a.family and a.family != hub["family"]:
                sys.exit(f"--family {a.family} does not match --shape {a.shape} ({hub['family']})")
        else:
            with open(a.config) as f:
                hub = json.load(f)
            hub.setdefault("family", a.family)
            if not hub["family"]:
                sys.exit("--config needs a \"family\" entry or --family")
            name = os.path.basename(a.config).rsplit(".", 1)[0]
        if a.fp8:
            name += f" fp8-{a.fp8}"
        full_layers = hub["num_hidden_layers"]
        hub["num_hidden_layers"] = min(full_layers, a.layers)
        name += f" ({hub['num_hidden_layers']} of {full_layers} layers, from config.json)"
        config, cls, cfg = hf_model_from_config(hub)
    t0 = time.time()
    with torch.device("cuda"):
        model = cls(config).eval()
    if not a.example:
        perturb_norms_and_biases(model, a.seed + 2)
    rotary = getattr(model.model, "rotary_emb", None)
    if rotary is None or not hasattr(rotary, "inv_freq"):
        sys.exit(f"{name}: cannot read transformers' RoPE frequencies to check the rope config")
    if not torch.allclose(rotary.inv_freq.double().cpu(), expected_inv_freq(cfg), rtol=1e-5):
        sys.exit(f"{name}: transformers' RoPE frequencies differ from the YAML's rope config")
    fp8_stored, fp8_dequant = {}, {}  # with --fp8: the checkpoint's float8 weights and scales; the dequantized weights
    if a.fp8:
        fp8_stored, fp8_dequant = quantize_model_fp8(model, cfg["layers"], a.fp8)
    model.to(torch.bfloat16)
    model.save_pretrained(ckpt)
    plan_source = a.example or ckpt
    if a.fp8:
        write_fp8_checkpoint(ckpt, fp8_stored, a.fp8, hub_style=not a.example)
        del fp8_stored
        if a.example:
            plan_source = fp8_example_yaml(a.example, a.fp8, os.path.join(a.work, f"model-fp8-{a.fp8}.yaml"))
    print(f"{name}: built and saved a random {sum(p.numel() for p in model.parameters())/1e9:.2f}B-parameter "
          f"checkpoint in {time.time()-t0:.1f} s", flush=True)

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sched = os.path.join(a.work, "sched.bin")
    # An example is planned from its YAML (made float8 with --fp8); a config from the saved checkpoint folder itself.
    subprocess.run([os.path.join(a.bin, "mkplan"), plan_source, "-o", sched, "--sms", str(sms),
                    "--max-tokens", str(a.max_tokens), "--force"], check=True)
    g = torch.Generator().manual_seed(a.seed + 1)
    prompts = [torch.randint(0, cfg["vocab"], (a.prompt + 5 * i,), generator=g).tolist() for i in range(a.batch)]
    npy = os.path.join(a.work, "logits.npy")
    mkrun = [os.path.join(a.bin, "mkrun"), sched, ckpt, "--backend", "cuda", "--tokens", str(a.tokens), "--dump-logits", npy]
    if a.batch == 1:
        run = subprocess.run(mkrun + ["--prompt-ids", ",".join(map(str, prompts[0]))], check=True, capture_output=True, text=True)
        print(run.stdout, end="", flush=True)
        results = [([int(t) for t in run.stdout.split("tokens:")[1].split("\n")[0].split()], npy)]
    else:
        batch_file = os.path.join(a.work, "batch.json")
        with open(batch_file, "w") as f:
            json.dump([{"ids": p} for p in prompts], f)
        run = subprocess.run(mkrun + ["--batch", batch_file, "--json"], check=True, capture_output=True, text=True)
        lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
        assert len(lines) == a.batch, run.stdout
        results = [(line["ids"], os.path.join(a.work, f"logits.{i}.npy")) for i, line in enumerate(lines)]
        print(f"{name}: {a.batch} sequences decoded together (prompts of {[len(p) for p in prompts]} tokens)", flush=True)

    def reference(seq):  # transformers bf16, then float32, over one sequence
        with torch.no_grad():
            model.to(torch.bfloat16)
            bf16 = model(seq).logits[0].float()
            model.float()
            # The bf16 cast rounded the RoPE frequencies to bf16, and with them original_inv_freq where
            # that is a buffer too (transformers 5): a phase error that grows with the position. The
            # float32 reference gets the float32 frequencies, checked against transformers' own above.
            rotary.inv_freq = expected_inv_freq(cfg).float().to(rotary.inv_freq.device)
            if hasattr(rotary, "original_inv_freq"):
                rotary.original_inv_freq = rotary.inv_freq.clone()
            # With --fp8, the bf16 round trip rounded the dequantized projections: float32 runs them exactly.
            for key, d in fp8_dequant.items():
                model.get_parameter(key).copy_(d)
            f32 = model(seq).logits[0].float()
        return bf16, f32

    ok = True
    worst, worst_bf16, agree, gapped, steps_all = 0.0, 0.0, 0, 0, 0
    for k, (prompt, (generated, logits_file)) in enumerate(zip(prompts, results)):
        steps = len(prompt) + a.tokens - 1
        ours = torch.from_numpy(np.load(logits_file)).cuda()
        seq = torch.tensor([prompt + generated[:-1]], device="cuda")
        assert ours.shape == (steps, cfg["vocab"]) and seq.shape[1] == steps, (ours.shape, seq.shape)
        bf16, f32 = reference(seq)
        who = f"sequence {k}, " if a.batch > 1 else ""
        for t in range(steps):
            e_ours, e_bf16 = rel(ours[t], f32[t]), rel(bf16[t], f32[t])
            worst, worst_bf16 = max(worst, e_ours), max(worst_bf16, e_bf16)
            if e_ours > e_bf16:
                ok = False
                print(f"  {who}step {t}: our error {e_ours:.3e} exceeds transformers bf16's {e_bf16:.3e}")
            top2 = torch.topk(f32[t], 2)
            if float(top2.values[0] - top2.values[1]) > 0.1:
                gapped += 1
                if int(torch.argmax(ours[t])) == int(top2.indices[0]):
                    agree += 1
                else:
                    ok = False
                    print(f"  {who}step {t}: top-1 {int(torch.argmax(ours[t]))} differs from float32's {int(top2.indices[0])}")
        steps_all += steps
    steps = steps_all
    if gapped == 0:  # no step with a clear top-1: the top-1 check would pass on anything
        ok = False
        print("  no step has a float32 top-1/top-2 gap above 0.1; the top-1 check compared nothing")
    how = (f", {a.max_tokens} tokens a step" if a.max_tokens > 1 else "") + (f", {a.batch} sequences at once" if a.batch > 1 else "")
    print(f"{name}: {steps} steps teacher-forced{how}; logit error vs float32: ours max {worst:.2e}, "
          f"transformers bf16 max {worst_bf16:.2e}; top-1 equal on {agree}/{gapped} steps with a gap > 0.1: "
          f"{'PASS' if ok else 'FAIL'}", flush=True)
    with open(os.path.join(a.work, "summary.json"), "w") as f:
        json.dump(dict(model=name, steps=steps, worst=worst, worst_bf16=worst_bf16, agree=agree, gapped=gapped, ok=ok), f)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
