#!/usr/bin/env python3
"""Golden logits of the Phi-3 and mixture-of-experts tiny models.

Same JSON format as golden_logits.py (tests/golden_logits_test.cc reads both),
for tests/data/tiny_models/{phi3_fused, phi4_partial_longrope, qwen3moe_tiny,
mixtral_tiny, olmoe_tiny} (made by make_tiny_models.py).

The reference is stock transformers in float64 with eager attention:
hf_exact64's patches cover only the Llama/Qwen modules, so RMSNorm, the
router softmax and the RoPE inverse frequencies keep transformers' float32
steps (about 1e-7 relative). Every golden is cross-checked against an
independent numpy float64 implementation written from the papers' and
transformers' definitions (fused projections, partial rotary, LongRoPE,
top-k routing with and without renormalisation, OLMoE's whole-projection q/k
norm) to 1e-5, well inside the C++ test's 1e-4.

Usage:  python scripts/reference/golden_phi3_moe.py [--only NAME ...]
"""

import argparse
import hashlib
import json
import math
import os
import platform
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_logits as gl  # noqa: E402

NAMES = ["phi3_fused", "phi4_partial_longrope", "qwen3moe_tiny", "mixtral_tiny", "olmoe_tiny"]


def rope_params(cfg):
    rp = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    rp.setdefault("rope_theta", cfg.get("rope_theta", 10000.0))
    return rp


def np_forward(model_dir, ids):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    W = {k: v.astype(np.float64) for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    mt = cfg["model_type"]
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or D // H
    eps = cfg["rms_norm_eps"]
    T = len(ids)
    rp = rope_params(cfg)
    rot = int(hd * rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))
    inv = 1.0 / float(rp["rope_theta"]) ** (np.arange(0, rot, 2, dtype=np.float64) / rot)
    scale = 1.0
    if rp.get("rope_type") == "longrope":
        orig = rp["original_max_position_embeddings"]
        # transformers: the set by this call's sequence length
        ext = np.array(rp["long_factor"] if T > orig else rp["short_factor"], dtype=np.float64)
        inv = inv / ext
        factor = rp.get("factor") or cfg["max_position_embeddings"] / orig
        scale = rp.get("attention_factor") or (
            1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig)))

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x):  # [T, nh, hd]: rotate_half over the first `rot` dims
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
        cos = (np.cos(np.concatenate([ang, ang], -1)) * scale)[:, None, :]
        sin = (np.sin(np.concatenate([ang, ang], -1)) * scale)[:, None, :]
        xr, xp = x[..., :rot], x[..., rot:]
        x1, x2 = xr[..., : rot // 2], xr[..., rot // 2:]
        return np.concatenate([xr * cos + np.concatenate([-x2, x1], -1) * sin, xp], -1)

    def silu(g):
        return g / (1 + np.exp(-g))

    def swiglu(h, g_w, u_w, d_w):
        return (silu(h @ g_w.T) * (h @ u_w.T)) @ d_w.T

    def moe(h, p):
        mix = mt == "mixtral"
        pre = p + ("block_sparse_moe." if mix else "mlp.")
        k = cfg["num_experts_per_tok"]
        renorm = mix or cfg.get("norm_topk_prob", False)
        logits = h @ W[pre + "gate.weight"].T
        probs = np.exp(logits - logits.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out = np.zeros_like(h)
        names = ("w1", "w3", "w2") if mix else ("gate_proj", "up_proj", "down_proj")
        for t in range(h.shape[0]):
            top = np.argsort(-probs[t], kind="stable")[:k]
            w = probs[t, top]
            if renorm:
                w = w / w.sum()
            for e, we in zip(top, w):
                ep = f"{pre}experts.{e}."
                out[t] += we * swiglu(h[t:t + 1], *(W[ep + n + ".weight"] for n in names))[0]
        return out

    x = W["model.embed_tokens.weight"][ids]
    stream = [x.copy()]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"])
        if mt == "phi3":
            qkv = h @ W[p + "self_attn.qkv_proj.weight"].T
            q, k, v = qkv[:, :H * hd], qkv[:, H * hd:(H + KV) * hd], qkv[:, (H + KV) * hd:]
        else:
            q, k, v = (h @ W[p + f"self_attn.{n}_proj.weight"].T for n in "qkv")
        if mt == "olmoe":  # one norm over the whole projection
            q, k = rms(q, W[p + "self_attn.q_norm.weight"]), rms(k, W[p + "self_attn.k_norm.weight"])
        q, k, v = q.reshape(T, H, hd), k.reshape(T, KV, hd), v.reshape(T, KV, hd)
        if mt == "qwen3_moe":  # per head
            q, k = rms(q, W[p + "self_attn.q_norm.weight"]), rms(k, W[p + "self_attn.k_norm.weight"])
        q, k = rope(q), rope(k)
        out = np.zeros((T, H, hd))
        for hh in range(H):
            kh = hh // (H // KV)
            s = q[:, hh, :] @ k[:, kh, :].T / math.sqrt(hd)
            s = s + np.triu(np.full((T, T), -np.inf), 1)
            s = np.exp(s - s.max(-1, keepdims=True))
            s = s / s.sum(-1, keepdims=True)
            out[:, hh, :] = s @ v[:, kh, :]
        x = x + out.reshape(T, H * hd) @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        if mt == "phi3":
            gu = h @ W[p + "mlp.gate_up_proj.weight"].T
            half = gu.shape[1] // 2
            x = x + (silu(gu[:, :half]) * gu[:, half:]) @ W[p + "mlp.down_proj.weight"].T
        else:
            x = x + moe(h, p)
        stream.append(x.copy())
    xn = rms(x, W["model.norm.weight"])
    head = W.get("lm_head.weight")
    if head is None:
        assert cfg["tie_word_embeddings"]
        head = W["model.embed_tokens.weight"]
    return xn @ head.T, stream


def make_golden(name):
    model_dir = os.path.join(gl.TINY, name)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    n_layers, vocab = cfg["num_hidden_layers"], cfg["vocab_size"]
    ids = gl.prompt_ids(vocab, seed=5252 + NAMES.index(name))
    # Stock float64 (no hf_exact64.prepare: it knows default and llama3 RoPE only).
    m = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager",
        experts_implementation="eager").to(torch.float64).eval()
    logits, hidden, layer_out = gl.hf_prefill(m, ids)
    residual = [hidden[0]] + layer_out
    np_logits, np_stream = np_forward(model_dir, ids)
    d_np = max(gl.maxabs(np_logits, logits), max(gl.maxabs(a, b) for a, b in zip(np_stream, residual)))
    assert d_np < 1e-5, (name, d_np)
    dec_last, dec_steps = gl.hf_decode(m, ids, gl.DECODE_PREFILL)
    d_dec = max(gl.maxabs(dec_steps, logits[gl.DECODE_PREFILL:]), gl.maxabs(dec_last, logits[gl.DECODE_PREFILL - 1]))
    assert d_dec < 1e-5, (name, d_dec)  # float32 steps of stock transformers
    gen, gen_logits = gl.hf_greedy(m, ids, gl.GREEDY_NEW)
    np_full, _ = np_forward(model_dir, ids + gen[:-1])
    assert [int(np.argmax(np_full[gl.PROMPT_LEN - 1 + i])) for i in range(gl.GREEDY_NEW)] == gen, name
    margins = [gl.top2_margin(lg) for lg in gen_logits]
    g = {
        "format": "specline.golden.tiny.v1",
        "model": name,
        "model_dir": f"tests/data/tiny_models/{name}",
        "model_safetensors_sha256": hashlib.sha256(
            open(os.path.join(model_dir, "model.safetensors"), "rb").read()).hexdigest(),
        "architecture": cfg["architectures"][0],
        "generator": "scripts/reference/golden_phi3_moe.py",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
        "reference": ("stock transformers eager attention in float64 (float32 RMSNorm, router softmax and "
                      "RoPE frequencies); cross-checked against an independent numpy float64 implementation"),
        "dtype": "float64",
        "significant_digits": gl.SIG,
        "n_layers": n_layers,
        "hidden_size": cfg["hidden_size"],
        "vocab_size": vocab,
        "input_ids": ids,
        "prefill": {"logits": gl.rnd(logits)},
        "decode": {
            "prefill_len": gl.DECODE_PREFILL,
            "prefill_last_logits": gl.rnd(dec_last),
            "step_positions": list(range(gl.DECODE_PREFILL, gl.PROMPT_LEN)),
            "step_input_ids": ids[gl.DECODE_PREFILL:],
            "step_logits": gl.rnd(dec_steps),
        },
        "hidden_states": {"residual_stream": [gl.rnd(h) for h in residual]},
        "greedy": {"max_new_tokens": gl.GREEDY_NEW, "generated_ids": gen, "top2_margin": gl.rnd(margins)},
        "checks": {"numpy_f64_vs_golden_max_abs": d_np, "decode_vs_prefill_logits_max_abs": d_dec,
                   "prefill_logits_std": float(logits.std())},
    }
    path = os.path.join(gl.GOLDEN, f"{name}.json")
    with open(path, "w") as f:
        json.dump(g, f, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: gen={gen}; min margin={min(margins):.3g}; numpy diff={d_np:.2e}; "
          f"logit std={float(logits.std()):.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    for name in NAMES:
        if not args.only or name in args.only:
            make_golden(name)


if __name__ == "__main__":
    sys.exit(main())
