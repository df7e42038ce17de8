#!/usr/bin/env python3
"""Golden logits / hidden states / greedy tokens for the tiny test models.

For each tests/data/tiny_models/<name>/ this writes tests/data/golden/<name>.json
(schema: see scripts/reference/README.md).

Reference: transformers (model loaded from the saved directory, eager
attention) run in float64, with hf_exact64 removing the three places where
stock transformers silently computes in float32 (RMSNorm, RoPE cos/sin, eager
softmax).  The result is cross-checked against
  * an independent numpy float64 implementation (reads config.json +
    model.safetensors directly; must agree to < 1e-9),
  * stock transformers float64 and stock float32 (differences recorded in
    "checks" so C++ test writers can pick tolerances),
  * prefill-vs-decode consistency and model.generate() for the greedy ids.

Usage:  python scripts/reference/golden_logits.py [--only llama_gqa ...]
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
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_exact64  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = os.path.join(REPO, "tests", "data", "tiny_models")
GOLDEN = os.path.join(REPO, "tests", "data", "golden")
NAMES = ["llama_gqa", "llama_tied", "llama3_scaled", "qwen2_bias", "qwen3_qknorm",
         "gemma2_softcap", "gemma3_swa"]
# Stock transformers' Gemma modules compute RMSNorm, RoPE and the softmax in
# float32 even in a float64 model (hf_exact64 patches only Llama / Qwen), so
# the Gemma goldens are float64 up to those casts: HF vs the NumPy float64
# reference is checked to GEMMA_TOL instead of 1e-9 (still 20x below the
# C++ tests' 1e-4).
GEMMA_TOL = 5e-6

PROMPT_LEN = 12
DECODE_PREFILL = 5
GREEDY_NEW = 20
SIG = 7  # significant digits stored


def rnd(x):
    """Round floats (nested lists / arrays) to SIG significant digits."""
    if isinstance(x, (list, tuple)):
        return [rnd(v) for v in x]
    if isinstance(x, np.ndarray) or torch.is_tensor(x):
        return rnd(np.asarray(x, dtype=np.float64).tolist())
    return float(f"{float(x):.{SIG}g}")


def prompt_ids(vocab, seed):
    """12 fixed ids: BOS(1) first, id 0 at position 3, id vocab-1 at position 7."""
    rng = np.random.Generator(np.random.PCG64(seed))
    ids = [int(v) for v in rng.integers(3, vocab - 1, size=PROMPT_LEN)]
    ids[0] = 1
    ids[3] = 0
    ids[7] = vocab - 1
    return ids


# ----------------------------------------------------------------------------
# Independent numpy float64 reference (does not use transformers at all).
# ----------------------------------------------------------------------------
def np_inv_freq(cfg, head_dim):
    rp = cfg.get("rope_parameters") or {}
    theta = float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if rp.get("rope_type", "default") == "llama3":
        factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        out = []
        for f in inv:
            wl = 2 * math.pi / f
            if wl < old / hi:
                out.append(f)
            elif wl > old / lo:
                out.append(f / factor)
            else:
                s = (old / wl - lo) / (hi - lo)
                out.append((1 - s) * f / factor + s * f)
        inv = np.array(out)
    else:
        assert rp.get("rope_type", "default") == "default"
    return inv


def np_forward_gemma(model_dir, ids):
    """Gemma 2 / 3 in NumPy float64, from config.json + model.safetensors:
    sqrt(D)-scaled tied embeddings, RMSNorm by (1 + w), q/k norms (gemma3),
    per-layer-type RoPE bases, 1/sqrt(query_pre_attn_scalar), attention soft
    cap, causal + sliding-window mask (k > q - window), post-norms, GeGLU
    (tanh gelu), final soft cap. Returns what np_forward returns."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    W = {k: v.astype(np.float64) for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["head_dim"]
    eps = cfg["rms_norm_eps"]
    gemma3 = cfg["model_type"] == "gemma3_text"
    T = len(ids)
    n_layers = cfg["num_hidden_layers"]
    types = cfg.get("layer_types") or [
        "sliding_attention" if l % 2 == 0 else "full_attention" for l in range(n_layers)]
    rp = cfg.get("rope_parameters") or {}
    if "full_attention" in rp:
        bases = {t: rp[t]["rope_theta"] for t in ("full_attention", "sliding_attention")}
    else:
        base = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
        bases = {"full_attention": base, "sliding_attention": base}
    window = cfg["sliding_window"]
    acap = cfg.get("attn_logit_softcapping")
    fcap = cfg.get("final_logit_softcapping")
    scale = cfg["query_pre_attn_scalar"] ** -0.5

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1.0 + w)

    def rope(x, base):
        inv = 1.0 / base ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
        cos = np.cos(np.concatenate([ang, ang], -1))[:, None, :]
        sin = np.sin(np.concatenate([ang, ang], -1))[:, None, :]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + np.concatenate([-x2, x1], -1) * sin

    def lin(x, name):
        return x @ W[name + ".weight"].T

    def gelu_tanh(g):
        return 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g ** 3)))

    E = W["model.embed_tokens.weight"]
    x = E[ids] * math.sqrt(D)
    stream = [x.copy()]
    qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
    for l in range(n_layers):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").reshape(T, H, hd)
        k = lin(h, p + "self_attn.k_proj").reshape(T, KV, hd)
        v = lin(h, p + "self_attn.v_proj").reshape(T, KV, hd)
        if gemma3:
            q = rms(q, W[p + "self_attn.q_norm.weight"])
            k = rms(k, W[p + "self_attn.k_norm.weight"])
        q, k = rope(q, bases[types[l]]), rope(k, bases[types[l]])
        visible = ki <= qi
        if types[l] == "sliding_attention":
            visible = visible & (ki > qi - window)
        out = np.zeros((T, H, hd))
        for hh in range(H):
            kh = hh // (H // KV)
            s_ = q[:, hh, :] @ k[:, kh, :].T * scale
            if acap:
                s_ = acap * np.tanh(s_ / acap)
            s_ = np.where(visible, s_, -np.inf)
            s_ = np.exp(s_ - s_.max(-1, keepdims=True))
            s_ = s_ / s_.sum(-1, keepdims=True)
            out[:, hh, :] = s_ @ v[:, kh, :]
        a = lin(out.reshape(T, H * hd), p + "self_attn.o_proj")
        x = x + rms(a, W[p + "post_attention_layernorm.weight"])
        h = rms(x, W[p + "pre_feedforward_layernorm.weight"])
        g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        m = lin(gelu_tanh(g) * u, p + "mlp.down_proj")
        x = x + rms(m, W[p + "post_feedforward_layernorm.weight"])
        stream.append(x.copy())
    xn = rms(x, W["model.norm.weight"])
    logits = xn @ E.T
    if fcap:
        logits = fcap * np.tanh(logits / fcap)
    return logits, stream, xn


def np_forward(model_dir, ids):
    """Returns (logits [T,V], residual stream list of n_layers+1 arrays [T,D])."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    if cfg["model_type"].startswith("gemma"):
        return np_forward_gemma(model_dir, ids)
    W = {k: v.astype(np.float64) for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or D // H
    eps = cfg["rms_norm_eps"]
    qwen3 = cfg["model_type"] == "qwen3"
    T = len(ids)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def rope(x):  # x [T, nh, hd], rotate-half (GPT-NeoX) convention as in HF checkpoints
        inv = np_inv_freq(cfg, hd)
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
        cos = np.cos(np.concatenate([ang, ang], -1))[:, None, :]
        sin = np.sin(np.concatenate([ang, ang], -1))[:, None, :]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + np.concatenate([-x2, x1], -1) * sin

    def lin(x, name):
        y = x @ W[name + ".weight"].T
        if name + ".bias" in W:
            y = y + W[name + ".bias"]
        return y

    x = W["model.embed_tokens.weight"][ids]
    stream = [x.copy()]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").reshape(T, H, hd)
        k = lin(h, p + "self_attn.k_proj").reshape(T, KV, hd)
        v = lin(h, p + "self_attn.v_proj").reshape(T, KV, hd)
        if qwen3:
            q = rms(q, W[p + "self_attn.q_norm.weight"])
            k = rms(k, W[p + "self_attn.k_norm.weight"])
        q, k = rope(q), rope(k)
        out = np.zeros((T, H, hd))
        for hh in range(H):
            kh = hh // (H // KV)
            s = q[:, hh, :] @ k[:, kh, :].T / math.sqrt(hd)
            s = s + np.triu(np.full((T, T), -np.inf), 1)
            s = np.exp(s - s.max(-1, keepdims=True))
            s = s / s.sum(-1, keepdims=True)
            out[:, hh, :] = s @ v[:, kh, :]
        x = x + lin(out.reshape(T, H * hd), p + "self_attn.o_proj")
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        x = x + lin(g / (1 + np.exp(-g)) * u, p + "mlp.down_proj")
        stream.append(x.copy())
    xn = rms(x, W["model.norm.weight"])
    head = W.get("lm_head.weight")
    if head is None:
        assert cfg["tie_word_embeddings"]
        head = W["model.embed_tokens.weight"]
    return xn @ head.T, stream, xn


# ----------------------------------------------------------------------------
# transformers runs
# ----------------------------------------------------------------------------
def load(model_dir, dtype):
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    m = m.to(dtype).eval()
    if dtype == torch.float64 and not m.config.model_type.startswith("gemma"):
        hf_exact64.prepare(m)  # (Gemma's modules are not patched: see GEMMA_TOL)
    return m


@torch.no_grad()
def hf_prefill(model, ids):
    layers = model.model.layers
    captured = {}

    def hook(idx):
        def f(mod, args, out):
            captured[idx] = (out[0] if isinstance(out, tuple) else out)[0].clone()
        return f

    hs = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(layers)]
    try:
        out = model(torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    finally:
        for h in hs:
            h.remove()
    hidden = [h[0] for h in out.hidden_states]
    layer_out = [captured[i] for i in range(len(layers))]
    return out.logits[0], hidden, layer_out


@torch.no_grad()
def hf_decode(model, ids, n_prefill):
    out = model(torch.tensor([ids[:n_prefill]]), use_cache=True)
    pkv = out.past_key_values
    prefill_last = out.logits[0, -1]
    steps = []
    for pos in range(n_prefill, len(ids)):
        out = model(torch.tensor([[ids[pos]]]), past_key_values=pkv, use_cache=True,
                    position_ids=torch.tensor([[pos]]))
        pkv = out.past_key_values
        steps.append(out.logits[0, -1])
    return prefill_last, torch.stack(steps)


@torch.no_grad()
def hf_greedy(model, ids, n_new):
    """Manual greedy loop with KV cache. Returns ids, logits of each step."""
    out = model(torch.tensor([ids]), use_cache=True)
    pkv, logits = out.past_key_values, out.logits[0, -1]
    gen, step_logits = [], []
    for i in range(n_new):
        step_logits.append(logits)
        t = int(torch.argmax(logits))
        gen.append(t)
        if i + 1 == n_new:
            break
        out = model(torch.tensor([[t]]), past_key_values=pkv, use_cache=True)
        pkv, logits = out.past_key_values, out.logits[0, -1]
    return gen, torch.stack(step_logits)


def top2_margin(logits):
    v = torch.topk(logits, 2).values
    return float(v[0] - v[1])


def first_divergence(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None


def maxabs(a, b):
    return float((torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max())


def make_golden(name):
    model_dir = os.path.join(TINY, name)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    n_layers = cfg["num_hidden_layers"]
    vocab = cfg["vocab_size"]
    ids = prompt_ids(vocab, seed=4242 + NAMES.index(name))

    hf_exact64.set_active(True)
    m64 = load(model_dir, torch.float64)
    logits, hidden, layer_out = hf_prefill(m64, ids)
    assert logits.shape == (PROMPT_LEN, vocab) and logits.dtype == torch.float64
    assert len(hidden) == n_layers + 1 and len(layer_out) == n_layers

    gemma = cfg["model_type"].startswith("gemma")
    tol = GEMMA_TOL if gemma else 1e-9
    # --- structure of HF hidden_states (verified, not assumed) ---
    # (Gemma's hidden_states[0] is the sqrt(D)-scaled embedding: a runtime
    # tap at boundary 0 is taken after the scaling too.)
    if not gemma:
        assert torch.equal(hidden[0], m64.model.embed_tokens(torch.tensor(ids)))
    for k in range(1, n_layers):
        assert torch.equal(hidden[k], layer_out[k - 1]), k
    normed_last = m64.model.norm(layer_out[-1])
    assert torch.allclose(hidden[n_layers], normed_last, atol=0, rtol=0), "last hidden state is not norm(last layer)"
    assert not torch.allclose(hidden[n_layers], layer_out[-1])
    # lm_head(final hidden) == logits (before Gemma 2's final soft cap)
    if not cfg.get("final_logit_softcapping"):
        assert torch.allclose(m64.lm_head(hidden[n_layers]), logits, rtol=0, atol=1e-12)
    residual = [hidden[0]] + layer_out  # residual stream after i layers, all pre-norm

    # --- independent numpy reference ---
    np_logits, np_stream, np_final = np_forward(model_dir, ids)
    d_np_logits = maxabs(np_logits, logits)
    d_np_hidden = max(maxabs(a, b) for a, b in zip(np_stream, residual))
    d_np_final = maxabs(np_final, hidden[n_layers])
    assert d_np_logits < tol and d_np_hidden < tol and d_np_final < tol, (d_np_logits, d_np_hidden, d_np_final)

    # --- decode with KV cache ---
    dec_prefill_last, dec_steps = hf_decode(m64, ids, DECODE_PREFILL)
    d_dec = max(maxabs(dec_steps, logits[DECODE_PREFILL:]), maxabs(dec_prefill_last, logits[DECODE_PREFILL - 1]))
    assert d_dec < tol, d_dec

    # --- greedy ---
    gen, gen_logits = hf_greedy(m64, ids, GREEDY_NEW)
    margins = [top2_margin(l) for l in gen_logits]
    # cross-check with model.generate (float64, exact patches) and a numpy full recompute
    # (explicit all-ones attention_mask: generate() would otherwise infer padding from pad_token_id, and
    # input_ids deliberately contain id 0)
    g2 = m64.generate(torch.tensor([ids]), attention_mask=torch.ones(1, PROMPT_LEN, dtype=torch.long),
                      max_new_tokens=GREEDY_NEW, min_new_tokens=GREEDY_NEW, do_sample=False,
                      eos_token_id=None, pad_token_id=vocab - 1)[0, PROMPT_LEN:].tolist()
    assert g2 == gen, (g2, gen)
    np_full, _, _ = np_forward(model_dir, ids + gen[:-1])
    assert [int(np.argmax(np_full[PROMPT_LEN - 1 + i])) for i in range(GREEDY_NEW)] == gen
    d_np_greedy = maxabs(np_full[PROMPT_LEN - 1:], gen_logits)
    assert d_np_greedy < tol, d_np_greedy

    # --- stock transformers comparisons (informational) ---
    hf_exact64.set_active(False)
    m64s = load(model_dir, torch.float64)
    l64s, _, _ = hf_prefill(m64s, ids)
    m32 = load(model_dir, torch.float32)
    l32, h32, lo32 = hf_prefill(m32, ids)
    gen32, _ = hf_greedy(m32, ids, GREEDY_NEW)
    dec32_last, dec32 = hf_decode(m32, ids, DECODE_PREFILL)
    hf_exact64.set_active(True)

    logit_std = float(logits.std())
    checks = {
        "numpy_f64_vs_golden_prefill_logits_max_abs": d_np_logits,
        "numpy_f64_vs_golden_residual_stream_max_abs": d_np_hidden,
        "numpy_f64_vs_golden_greedy_step_logits_max_abs": d_np_greedy,
        "decode_vs_prefill_logits_max_abs": d_dec,
        "hf_stock_float64_vs_golden_prefill_logits_max_abs": maxabs(l64s, logits),
        "hf_float32_eager_vs_golden_prefill_logits_max_abs": maxabs(l32, logits),
        "hf_float32_eager_vs_golden_decode_logits_max_abs": max(maxabs(dec32, dec_steps), maxabs(dec32_last, dec_prefill_last)),
        "hf_float32_eager_vs_golden_residual_stream_max_abs": maxabs(torch.stack([h32[0]] + lo32), torch.stack(residual)),
        "hf_float32_greedy_ids": gen32,
        "hf_float32_greedy_first_divergence": first_divergence(gen32, gen),
        "prefill_logits_std": logit_std,
        "prefill_logits_abs_max": float(logits.abs().max()),
    }

    g = {
        "format": "specline.golden.tiny.v1",
        "model": name,
        "model_dir": f"tests/data/tiny_models/{name}",
        "model_safetensors_sha256": hashlib.sha256(open(os.path.join(model_dir, "model.safetensors"), "rb").read()).hexdigest(),
        "architecture": cfg["architectures"][0],
        "generator": "scripts/reference/golden_logits.py",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
        },
        "reference": ("transformers eager attention, float64 end-to-end (hf_exact64 patches remove stock float32 "
                      "casts in RMSNorm/RoPE/softmax); model loaded from model_dir (fp32 weights upcast); "
                      "cross-checked against an independent numpy float64 implementation"),
        "dtype": "float64",
        "significant_digits": SIG,
        "n_layers": n_layers,
        "hidden_size": cfg["hidden_size"],
        "vocab_size": vocab,
        "input_ids": ids,
        "prefill": {
            "description": "one forward over all input_ids (positions 0..n-1); logits[i] = next-token logits at position i",
            "logits": rnd(logits),
        },
        "decode": {
            "description": ("forward input_ids[:prefill_len] in one batch (prefill_last_logits = logits at position "
                            "prefill_len-1), then feed input_ids[p] for p in step_positions one token at a time "
                            "with the KV cache; step_logits[j] = logits after feeding input_ids[step_positions[j]]"),
            "prefill_len": DECODE_PREFILL,
            "prefill_last_logits": rnd(dec_prefill_last),
            "step_positions": list(range(DECODE_PREFILL, PROMPT_LEN)),
            "step_input_ids": ids[DECODE_PREFILL:],
            "step_logits": rnd(dec_steps),
        },
        "hidden_states": {
            "description": (
                "All for the prefill of input_ids; each entry is [seq_len][hidden_size]. "
                "residual_stream[i] = residual stream after i decoder layers, pre-norm (i=0: token embeddings, "
                "i=n_layers: output of the last decoder layer, before model.norm) -> matches a runtime tap at global "
                "layer boundary i. final_norm_output = model.norm(residual_stream[n_layers]) (input of lm_head). "
                "transformers' output_hidden_states tuple (length n_layers+1) equals residual_stream[0..n_layers-1] "
                "followed by final_norm_output: its LAST entry HAS the final norm applied (verified bit-exactly)."),
            "hf_last_hidden_state_has_final_norm": True,
            "residual_stream": [rnd(h) for h in residual],
            "last_layer_output_prenorm": rnd(layer_out[-1]),
            "final_norm_output": rnd(hidden[n_layers]),
        },
        "greedy": {
            "description": ("greedy (argmax) continuation of input_ids, no EOS stopping; generated_ids[j] = argmax of "
                            "step j logits; top2_margin[j] = top1 - top2 logit at step j"),
            "max_new_tokens": GREEDY_NEW,
            "generated_ids": gen,
            "top2_margin": rnd(margins),
        },
        "checks": checks,
    }
    os.makedirs(GOLDEN, exist_ok=True)
    path = os.path.join(GOLDEN, f"{name}.json")
    with open(path, "w") as f:
        json.dump(g, f, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: {os.path.getsize(path)} bytes; gen={gen}; min margin={min(margins):.3g}; "
          f"logit std={logit_std:.3f}; checks: " +
          ", ".join(f"{k}={v:.2e}" for k, v in checks.items() if isinstance(v, float)) +
          f"; fp32 greedy divergence={checks['hf_float32_greedy_first_divergence']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    hf_exact64.enable()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    for name in NAMES:
        if args.only and name not in args.only:
            continue
        make_golden(name)


if __name__ == "__main__":
    sys.exit(main())
