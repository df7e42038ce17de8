"""Make transformers' Llama / Qwen2 / Qwen3 forward pass genuinely float64.

Stock transformers (5.x) silently drops to float32 in three places even when
the model is cast to float64:
  1. RMSNorm:      hidden_states.to(torch.float32) before the variance;
  2. RoPE:         inv_freq is computed in float32 at construction and
                   cos/sin are computed from float32 angles;
  3. eager attn:   softmax(..., dtype=torch.float32).
That caps the "float64" reference at ~1e-7 relative accuracy.  enable() patches
exactly those three spots (nothing else) so that, for float64 inputs, every
operation runs in float64.  Inputs of any other dtype take the original code
path unchanged.  The float64 inv_freq is recomputed from the config with the
same formula transformers uses (default and llama3 rope types) and is checked
against transformers' own float32 inv_freq (rel. diff < 1e-6), so the patch
cannot silently change the model's semantics.
"""

import math

import torch
from torch import nn

from transformers.models.llama import modeling_llama
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3

_MODULES = (modeling_llama, modeling_qwen2, modeling_qwen3)
_ENABLED = False
_ACTIVE = True  # set_active(False) temporarily restores stock behaviour


def set_active(flag):
    global _ACTIVE
    _ACTIVE = bool(flag)


def _rms_forward(orig):
    def forward(self, hidden_states):
        if hidden_states.dtype != torch.float64 or not _ACTIVE:
            return orig(self, hidden_states)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states

    return forward


def _rope_forward(orig):
    def forward(self, x, position_ids):
        if x.dtype != torch.float64 or not _ACTIVE:
            return orig(self, x, position_ids)
        inv = self.inv_freq64.to(device=x.device)
        freqs = position_ids[..., None].to(torch.float64) * inv
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos, sin

    return forward


def _eager_attn(orig, repeat_kv):
    def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        if query.dtype != torch.float64 or not _ACTIVE:
            return orig(module, query, key, value, attention_mask, scaling, dropout=dropout, **kwargs)
        key_states = repeat_kv(key, module.num_key_value_groups)
        value_states = repeat_kv(value, module.num_key_value_groups)
        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        return attn_output, attn_weights

    return eager_attention_forward


def enable():
    global _ENABLED
    if _ENABLED:
        return
    for m in _MODULES:
        prefix = {"modeling_llama": "Llama", "modeling_qwen2": "Qwen2", "modeling_qwen3": "Qwen3"}[m.__name__.split(".")[-1]]
        norm = getattr(m, prefix + "RMSNorm")
        norm.forward = _rms_forward(norm.forward)
        rope = getattr(m, prefix + "RotaryEmbedding")
        rope.forward = _rope_forward(rope.forward)
        m.eager_attention_forward = _eager_attn(m.eager_attention_forward, m.repeat_kv)
    _ENABLED = True


def inv_freq_f64(config):
    """inv_freq in float64, same formula as transformers (default / llama3)."""
    rp = config.rope_parameters
    base = float(rp["rope_theta"])
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    assert rp.get("partial_rotary_factor", 1.0) == 1.0
    dim = head_dim
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rtype = rp.get("rope_type", "default")
    if rtype == "default":
        return inv
    if rtype == "llama3":
        factor = float(rp["factor"])
        lo, hi = float(rp["low_freq_factor"]), float(rp["high_freq_factor"])
        old = float(rp["original_max_position_embeddings"])
        low_wl, high_wl = old / lo, old / hi
        out = []
        for f in inv.tolist():
            wl = 2 * math.pi / f
            if wl < high_wl:
                out.append(f)
            elif wl > low_wl:
                out.append(f / factor)
            else:
                s = (old / wl - lo) / (hi - lo)
                out.append((1 - s) * f / factor + s * f)
        return torch.tensor(out, dtype=torch.float64)
    raise NotImplementedError(rtype)


def prepare(model):
    """Call after model.to(torch.float64): attach float64 inv_freq to rotary modules."""
    n = 0
    for mod in model.modules():
        if hasattr(mod, "inv_freq") and hasattr(mod, "attention_scaling"):
            inv64 = inv_freq_f64(model.config)
            ref = mod.original_inv_freq.to(torch.float64)
            rel = ((inv64 - ref).abs() / ref.abs()).max().item()
            assert rel < 1e-6, f"float64 inv_freq disagrees with transformers' ({rel})"
            assert mod.attention_scaling == 1.0
            mod.inv_freq64 = inv64
            n += 1
    assert n >= 1
    return model
