#!/usr/bin/env python3
"""Golden logits for the SPD speculation module (draft model), in float64.

Written from the SPD description (../shared/REFERENCES.md "SPD",
docs/heads.md), not from the C++ code. It writes, under OUT
(tests/data/spd_module by default):

  base_a/, base_b/   tiny random Llama bases made with transformers and saved
                     with save_pretrained (A: 4 layers, untied; B: 5 layers,
                     tied embeddings, eps 1e-6)
  a_v11/ a_v10/ b_v11/ b_v10/
                     random SPD heads (specline.head.v1, NumPy + safetensors):
                     A with n = 2 stages (L divisible by n), B with n = 3 (not
                     divisible); L_s = 2, 1, 1, 2 decoder layers
  golden.json        per base: the token sequence and the true hidden states
                     H^j (Hugging Face index j, pre-norm) of every position;
                     per head: taps per depth and the last-row logits of a
                     sequence of Forward calls with mixed depths, rollback and
                     in-flight recompute (the way SPD drives the module).

The module, per row at depth d: feature g (v11: fc.i over concat of taps
bounds[0..i], i the largest with bounds[i] <= d*L//n; v10: fc.0 over H^0 at
d = 0, else fc.d over concat(H^0, H^{l//2}, H^l), l = d*L//n), then L_s Llama
layers (RoPE at the true position, causal), then the BASE final RMSNorm and
the head's lm_head. A call on rows [F, newest] replaces the module's inputs
from F on; since attention is causal, the last row's logits equal a full
causal forward over the current inputs of positions 0..newest, which is how
this reference computes them (no KV cache at all).

The base hidden states come from an own NumPy float64 forward, cross-checked
against transformers in float64 (hf_exact64), which must agree to 1e-10.

    python3 scripts/reference/spd_module_golden.py [OUT]
"""
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.numpy import save_file
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_exact64  # noqa: E402
from ref_io import save_pretrained_clean  # noqa: E402

T = 10  # sequence length

BASES = {
    "base_a": dict(seed=3101, L=4, dim=32, hidden=64, heads=4, kv=2, head_dim=8, vocab=64,
                   eps=1e-5, theta=10000.0, tied=False),
    "base_b": dict(seed=3102, L=5, dim=32, hidden=48, heads=4, kv=2, head_dim=8, vocab=56,
                   eps=1e-6, theta=10000.0, tied=True),
}
HEADS = {
    "a_v11": dict(base="base_a", layout="v11", n=2, Ls=2, seed=4101),
    "a_v10": dict(base="base_a", layout="v10", n=2, Ls=1, seed=4102),
    "b_v11": dict(base="base_b", layout="v11", n=3, Ls=1, seed=4103),
    "b_v10": dict(base="base_b", layout="v10", n=3, Ls=2, seed=4104),
}


# ---------------------------------------------------------------- base model
def make_base(name, b, out_root):
    cfg = LlamaConfig(vocab_size=b["vocab"], hidden_size=b["dim"], intermediate_size=b["hidden"],
                      num_hidden_layers=b["L"], num_attention_heads=b["heads"],
                      num_key_value_heads=b["kv"], head_dim=b["head_dim"], hidden_act="silu",
                      max_position_embeddings=64, rms_norm_eps=b["eps"], rope_theta=b["theta"],
                      tie_word_embeddings=b["tied"], bos_token_id=1, eos_token_id=2,
                      pad_token_id=None, attention_bias=False, mlp_bias=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    rng = np.random.Generator(np.random.PCG64(b["seed"]))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for pname in sorted(params):
            shape = tuple(params[pname].shape)
            if pname.endswith("norm.weight"):
                v = 1.0 + 0.1 * rng.standard_normal(shape)
            elif "embed_tokens" in pname:
                v = (0.2 if b["tied"] else 0.5) * rng.standard_normal(shape)
            elif pname == "lm_head.weight":
                v = 0.12 * rng.standard_normal(shape)
            else:
                v = 0.08 * rng.standard_normal(shape)
            params[pname].copy_(torch.from_numpy(v.astype(np.float32)))
    out = os.path.join(out_root, name)
    save_pretrained_clean(model, out)
    sd = {k: v.detach().to(torch.float64).numpy() for k, v in model.state_dict().items()}
    return out, sd


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, theta):
    # x: [T, heads, hd]; rotate_half pairing (i, i + hd/2); pos: [T].
    hd = x.shape[-1]
    half = hd // 2
    inv = 1.0 / theta ** (2.0 * np.arange(half) / hd)
    ang = pos[:, None, None] * inv[None, None, :]
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def llama_layer(x, pos, w, p, c):
    """One causal Llama decoder layer over rows x [T, dim] at positions pos."""
    nh, nkv, hd, eps = c["heads"], c["kv"], c["head_dim"], c["eps"]
    n = x.shape[0]
    xb = rmsnorm(x, w[p + "input_layernorm.weight"], eps)
    q = rope((xb @ w[p + "self_attn.q_proj.weight"].T).reshape(n, nh, hd), pos, c["theta"])
    k = rope((xb @ w[p + "self_attn.k_proj.weight"].T).reshape(n, nkv, hd), pos, c["theta"])
    v = (xb @ w[p + "self_attn.v_proj.weight"].T).reshape(n, nkv, hd)
    att = np.zeros((n, nh, hd))
    for h in range(nh):
        g = h // (nh // nkv)
        sc = q[:, h, :] @ k[:, g, :].T / np.sqrt(hd)  # [T, T]
        sc = np.where(np.tril(np.ones((n, n), bool)), sc, -np.inf)
        sc = np.exp(sc - sc.max(axis=1, keepdims=True))
        sc /= sc.sum(axis=1, keepdims=True)
        att[:, h, :] = sc @ v[:, g, :]
    x = x + att.reshape(n, -1) @ w[p + "self_attn.o_proj.weight"].T
    xb = rmsnorm(x, w[p + "post_attention_layernorm.weight"], eps)
    gate = xb @ w[p + "mlp.gate_proj.weight"].T
    up = xb @ w[p + "mlp.up_proj.weight"].T
    return x + (gate / (1.0 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T


def base_hidden(sd, b, tokens):
    """H^0..H^L (pre-norm) of every position: [L+1, T, dim], float64."""
    pos = np.arange(len(tokens), dtype=np.float64)
    x = sd["model.embed_tokens.weight"][tokens]
    hs = [x]
    for l in range(b["L"]):
        x = llama_layer(x, pos, sd, f"model.layers.{l}.", b)
        hs.append(x)
    return np.stack(hs)


@torch.no_grad()
def check_against_transformers(model_dir, sd, b, tokens, hs):
    m = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                         attn_implementation="eager").to(torch.float64).eval()
    hf_exact64.prepare(m)
    out = m(torch.tensor([tokens]), output_hidden_states=True, use_cache=False)
    hf = [h[0].numpy() for h in out.hidden_states]  # H^0..H^{L-1}, then norm(H^L)
    diff = max(np.abs(hf[j] - hs[j]).max() for j in range(b["L"]))
    normed = rmsnorm(hs[b["L"]], sd["model.norm.weight"], b["eps"])
    diff = max(diff, np.abs(hf[b["L"]] - normed).max())
    head = sd["model.embed_tokens.weight"] if b["tied"] else sd["lm_head.weight"]
    diff = max(diff, np.abs(out.logits[0].numpy() - normed @ head.T).max())
    assert diff < 1e-10, f"numpy base forward disagrees with transformers: {diff}"
    return float(diff)


# ---------------------------------------------------------------- SPD head
def default_taps(L, n):
    raw = [0, L // n, 3 * L // n, 6 * L // n, L - 1]
    out = []
    for t in raw:
        t = min(max(t, 0), L - 1)
        if t not in out:
            out.append(t)
    return out


def feature_plan(layout, taps, L, n, d):
    """(fc index, hidden-state indices concatenated, with repeats) at depth d."""
    if layout == "v11":
        i = max(k for k, t in enumerate(taps) if t <= d * L // n)
        return i, taps[: i + 1]
    if d == 0:
        return 0, [0]
    lmax = d * L // n
    return d, [0, lmax // 2, lmax]


def make_head(name, h, b, out_root):
    rng = np.random.Generator(np.random.PCG64(h["seed"]))
    L, n, dim = b["L"], h["n"], b["dim"]
    if h["layout"] == "v11":
        taps = default_taps(L, n)
        fc_in = [(i + 1) * dim for i in range(len(taps))]
    else:
        taps = sorted({j for d in range(n + 1) for j in feature_plan("v10", None, L, n, d)[1]})
        fc_in = [dim] + [3 * dim] * n

    def mat(rows, cols, std=None):
        std = std if std is not None else 1.0 / np.sqrt(cols)
        return rng.uniform(-np.sqrt(3) * std, np.sqrt(3) * std, (rows, cols)).astype(np.float32)

    def norm(k):
        return (1.0 + rng.uniform(-0.1, 0.1, k)).astype(np.float32)

    qd, kvd, hid = b["heads"] * b["head_dim"], b["kv"] * b["head_dim"], b["hidden"]
    t = {}
    for i, fi in enumerate(fc_in):
        t[f"fc.{i}.weight"] = mat(dim, fi)
    for j in range(h["Ls"]):
        p = f"layers.{j}."
        t[p + "input_layernorm.weight"] = norm(dim)
        t[p + "self_attn.q_proj.weight"] = mat(qd, dim)
        t[p + "self_attn.k_proj.weight"] = mat(kvd, dim)
        t[p + "self_attn.v_proj.weight"] = mat(kvd, dim)
        t[p + "self_attn.o_proj.weight"] = mat(dim, qd)
        t[p + "post_attention_layernorm.weight"] = norm(dim)
        t[p + "mlp.gate_proj.weight"] = mat(hid, dim)
        t[p + "mlp.up_proj.weight"] = mat(hid, dim)
        t[p + "mlp.down_proj.weight"] = mat(dim, hid)
    t["lm_head.weight"] = mat(b["vocab"], dim, std=2.0 / np.sqrt(dim))

    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    save_file(t, os.path.join(d, "head.safetensors"), metadata={"format": "specline.head.v1"})
    os.chmod(os.path.join(d, "head.safetensors"), 0o644)  # safetensors writes 0600
    base_fp = dict(arch="llama", dim=dim, hidden_dim=hid, n_layers=L, n_heads=b["heads"],
                   n_kv_heads=b["kv"], head_dim=b["head_dim"], vocab_size=b["vocab"],
                   norm_eps=b["eps"], rope_theta=b["theta"], qkv_bias=False, qk_norm=False)
    meta = {"format": "specline.head.v1", "method": "spd", "base": base_fp,
            "spd": {"n_stages": n, "taps": taps, "n_layers": h["Ls"], "feature_layout": h["layout"]},
            "dtype": "F32", "tensors": {k: list(v.shape) for k, v in t.items()},
            "metadata": {"recipe": "random (scripts/reference/spd_module_golden.py)", "data": "none",
                         "steps": 0, "created": "2026-11-23"}}
    with open(os.path.join(d, "head.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    return taps, {k: v.astype(np.float64) for k, v in t.items()}


def module_last_logits(hw, h, b, base_sd, taps, H, tokens, depths):
    """Full causal forward of the module over positions 0..len(depths)-1."""
    L, n = b["L"], h["n"]
    feats = []
    for p, d in enumerate(depths):
        i, idx = feature_plan(h["layout"], taps, L, n, d)
        # H^0 is the embedding row of the token: the module computes it itself.
        parts = [base_sd["model.embed_tokens.weight"][tokens[p]] if j == 0 else H[j][p] for j in idx]
        feats.append(hw[f"fc.{i}.weight"] @ np.concatenate(parts))
    x = np.stack(feats)
    pos = np.arange(len(depths), dtype=np.float64)
    for j in range(h["Ls"]):
        x = llama_layer(x, pos, hw, f"layers.{j}.", b)
    # The BASE final norm (frozen, shared), the head's own LM head.
    return hw["lm_head.weight"] @ rmsnorm(x[-1], base_sd["model.norm.weight"], b["eps"])


def schedule(n):
    """Forward calls as SPD makes them: (first position, depths of the rows)."""
    calls = []
    cur = [n, n, 1, 0]  # module inputs' depths of positions 0..len-1
    calls.append((0, list(cur)))
    done = lambda: next((p for p, d in enumerate(cur) if d < n), len(cur))  # noqa: E731
    for _ in range(4):  # cycles: in-flight rows advance one stage, one new row
        f = done()
        cur = cur[:f] + [min(d + 1, n) for d in cur[f:]] + [0]
        calls.append((f, cur[f:]))
    # Rejection: crop to position 3 and refeed it at full depth plus two new rows.
    cur = cur[:3] + [n, 1, 0]
    calls.append((3, cur[3:]))
    for _ in range(2):
        f = done()
        cur = cur[:f] + [min(d + 1, n) for d in cur[f:]] + [0]
        calls.append((f, cur[f:]))
    assert len(cur) <= T
    return calls


def main():
    out_root = sys.argv[1] if len(sys.argv) > 1 else "tests/data/spd_module"
    os.makedirs(out_root, exist_ok=True)
    hf_exact64.enable()
    golden = {"format": "specline.golden.spd_module.v1",
              "generator": "scripts/reference/spd_module_golden.py",
              "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "numpy": np.__version__},
              "bases": {}, "heads": {}}
    based = {}
    for name, b in BASES.items():
        d, sd = make_base(name, b, out_root)
        tokens = [1, 5, 0, b["vocab"] - 1, 7, 3, 11, 2, 9, 4][:T]
        hs = base_hidden(sd, b, tokens)
        diff = check_against_transformers(d, sd, b, tokens, hs)
        hs32 = hs.astype(np.float32)  # what the stages would hand over
        based[name] = (sd, tokens, hs32.astype(np.float64))
        golden["bases"][name] = {"dir": name, "n_layers": b["L"], "dim": b["dim"],
                                 "vocab_size": b["vocab"], "tokens": tokens,
                                 "hidden": hs32.tolist(), "transformers_max_abs_diff": diff}
    for name, h in HEADS.items():
        b = BASES[h["base"]]
        sd, tokens, H = based[h["base"]]
        taps, hw = make_head(name, h, b, out_root)
        tfd = [sorted(set(feature_plan(h["layout"], taps, b["L"], h["n"], d)[1]))
               for d in range(h["n"] + 1)]
        calls, cur = [], []
        for first, depths in schedule(h["n"]):
            assert first <= len(cur)
            cur = cur[:first] + depths
            rows = [{"pos": first + k, "token": tokens[first + k], "depth": dd}
                    for k, dd in enumerate(depths)]
            logits = module_last_logits(hw, h, b, sd, taps, H, tokens, cur)
            calls.append({"rows": rows, "last_logits": logits.tolist()})
        golden["heads"][name] = {"dir": name, "base": h["base"], "layout": h["layout"],
                                 "n_stages": h["n"], "n_layers": h["Ls"], "taps": taps,
                                 "taps_for_depth": tfd,
                                 "all_taps": sorted({j for t in tfd for j in t}),
                                 "calls": calls}
    with open(os.path.join(out_root, "golden.json"), "w") as f:
        json.dump(golden, f)
        f.write("\n")


if __name__ == "__main__":
    main()
