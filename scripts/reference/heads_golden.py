#!/usr/bin/env python3
"""Golden logits for a PPSD one-layer draft head ("ppsd-layer"), in float64.

Writes a tiny random head in the specline.head.v1 format (docs/heads.md)
with NumPy + safetensors, independently of the C++ writer, and the logits the
head gives for a few hidden states after layer E at positions 0..T-1 of one
sequence: one Llama decoder layer (RMSNorm, GQA attention with rotate_half
RoPE at the true position, causal over the head's own cache, SwiGLU MLP),
then RMSNorm and the LM head. tests/heads_test.cc compares at 1e-4.

    python3 scripts/reference/heads_golden.py tests/data/heads
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file

BASE = dict(arch="llama", dim=32, hidden_dim=64, n_layers=3, n_heads=4, n_kv_heads=2,
            head_dim=8, vocab_size=48, norm_eps=1e-5, rope_theta=10000.0,
            qkv_bias=False, qk_norm=False)
EXIT_LAYER = 1
T = 7  # positions


def layer_tensors(rng, c):
    dim, hid = c["dim"], c["hidden_dim"]
    qd, kvd = c["n_heads"] * c["head_dim"], c["n_kv_heads"] * c["head_dim"]

    def mat(rows, cols, std=None):
        std = std if std is not None else 1.0 / np.sqrt(cols)
        return rng.uniform(-np.sqrt(3) * std, np.sqrt(3) * std, (rows, cols)).astype(np.float32)

    def norm(n):
        return (1.0 + rng.uniform(-0.1, 0.1, n)).astype(np.float32)

    t = {}
    p = "layers.0."
    t[p + "input_layernorm.weight"] = norm(dim)
    t[p + "self_attn.q_proj.weight"] = mat(qd, dim)
    t[p + "self_attn.k_proj.weight"] = mat(kvd, dim)
    t[p + "self_attn.v_proj.weight"] = mat(kvd, dim)
    t[p + "self_attn.o_proj.weight"] = mat(dim, qd)
    t[p + "post_attention_layernorm.weight"] = norm(dim)
    t[p + "mlp.gate_proj.weight"] = mat(hid, dim)
    t[p + "mlp.up_proj.weight"] = mat(hid, dim)
    t[p + "mlp.down_proj.weight"] = mat(dim, hid)
    t["norm.weight"] = norm(dim)
    t["lm_head.weight"] = mat(c["vocab_size"], dim, std=2.0 / np.sqrt(dim))
    return t


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, theta):
    # x: [heads, head_dim], rotate_half pairing (i, i + hd/2).
    hd = x.shape[-1]
    half = hd // 2
    inv = 1.0 / theta ** (2.0 * np.arange(half) / hd)
    ang = pos * inv
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[:, :half], x[:, half:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def head_logits(t, c, hidden):
    w = {k: v.astype(np.float64) for k, v in t.items()}
    p = "layers.0."
    nh, nkv, hd = c["n_heads"], c["n_kv_heads"], c["head_dim"]
    eps = c["norm_eps"]
    ks, vs, out = [], [], []
    for pos, h in enumerate(hidden):
        x = h.astype(np.float64)
        xb = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
        q = rope((w[p + "self_attn.q_proj.weight"] @ xb).reshape(nh, hd), pos, c["rope_theta"])
        k = rope((w[p + "self_attn.k_proj.weight"] @ xb).reshape(nkv, hd), pos, c["rope_theta"])
        v = (w[p + "self_attn.v_proj.weight"] @ xb).reshape(nkv, hd)
        ks.append(k)
        vs.append(v)
        K, V = np.stack(ks), np.stack(vs)  # [pos+1, nkv, hd]
        att = np.zeros((nh, hd))
        for hh in range(nh):
            g = hh // (nh // nkv)
            sc = K[:, g, :] @ q[hh] / np.sqrt(hd)
            sc = np.exp(sc - sc.max())
            sc /= sc.sum()
            att[hh] = sc @ V[:, g, :]
        x = x + w[p + "self_attn.o_proj.weight"] @ att.reshape(-1)
        xb = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = w[p + "mlp.gate_proj.weight"] @ xb
        up = w[p + "mlp.up_proj.weight"] @ xb
        x = x + w[p + "mlp.down_proj.weight"] @ (gate / (1.0 + np.exp(-gate)) * up)
        out.append(w["lm_head.weight"] @ rmsnorm(x, w["norm.weight"], eps))
    return np.stack(out)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data/heads"
    head_dir = os.path.join(out_dir, "tiny_ppsd_layer")
    os.makedirs(head_dir, exist_ok=True)
    rng = np.random.default_rng(20261122)
    t = layer_tensors(rng, BASE)
    save_file(t, os.path.join(head_dir, "head.safetensors"), metadata={"format": "specline.head.v1"})
    head = {
        "format": "specline.head.v1",
        "method": "ppsd-layer",
        "base": BASE,
        "exit_layer": EXIT_LAYER,
        "dtype": "F32",
        "tensors": {k: list(v.shape) for k, v in t.items()},
        "metadata": {"recipe": "random (scripts/reference/heads_golden.py)", "data": "none",
                     "steps": 0, "created": "2026-11-22"},
    }
    with open(os.path.join(head_dir, "head.json"), "w") as f:
        json.dump(head, f, indent=2)
        f.write("\n")
    hidden = rng.standard_normal((T, BASE["dim"])).astype(np.float32)
    logits = head_logits(t, BASE, hidden)
    golden = {"base": BASE, "exit_layer": EXIT_LAYER, "head": "tiny_ppsd_layer",
              "hidden": hidden.astype(np.float64).tolist(), "logits": logits.tolist()}
    with open(os.path.join(out_dir, "ppsd_layer_golden.json"), "w") as f:
        json.dump(golden, f)
        f.write("\n")


if __name__ == "__main__":
    main()
