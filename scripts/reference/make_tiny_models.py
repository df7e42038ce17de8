#!/usr/bin/env python3
"""Create tiny, deterministic, random Hugging Face model directories for tests.

Writes tests/data/tiny_models/<name>/{config.json, model.safetensors} (fp32).

Models are built with transformers' own classes (LlamaForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM) and saved with save_pretrained, so
config.json is exactly what transformers writes.  (transformers 5.x always
writes safetensors; the old `safe_serialization` flag no longer exists.)
The generation_config.json that save_pretrained also writes is deleted: it
carries nothing the runtime needs and the brief asks for config + weights only.

Weights are NOT transformers' default init (std 0.02, norms = 1, which gives
near-uniform logits). Every parameter is drawn from numpy's PCG64 generator
(stable across numpy versions) with a fixed seed per model, in sorted
parameter-name order:
  * embed_tokens             N(0, 0.5) untied; N(0, 0.1) when tied (it is also
                             the lm_head; larger values make greedy output collapse
                             into repeating the input token)
  * lm_head (untied)         N(0, 0.12)  (logit std ~0.9)
  * linear weights           N(0, 0.08)  (q/k/v/o, gate/up/down)
  * linear biases (qwen2)    N(0, 0.1)
  * RMSNorm weights          1 + N(0, 0.1)  (incl. qwen3 q_norm/k_norm); Gemma
                             stores N(0, 0.1) since its norm multiplies by 1 + w
so that logits have a spread of a few units and bugs show up.

Usage:  python scripts/reference/make_tiny_models.py [--out tests/data/tiny_models]
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ref_io import save_pretrained_clean  # noqa: E402
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)
from transformers import (MixtralConfig, MixtralForCausalLM, OlmoeConfig, OlmoeForCausalLM, Phi3Config,
                          Phi3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Common shape knobs. dim 64, intermediate 96 (non-square MLP so a transposed
# weight shows up), GQA with 4 query heads / 2 kv heads.
COMMON = dict(
    hidden_size=64,
    intermediate_size=96,
    num_attention_heads=4,
    num_key_value_heads=2,
    hidden_act="silu",
    max_position_embeddings=256,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
    attention_dropout=0.0,
)

# Gemma configs take hidden_activation instead.
GEMMA_COMMON = {k: v for k, v in COMMON.items() if k != "hidden_act"}

MODELS = {
    # Llama, GQA 4/2, head_dim 16, untied, rope_theta 10000, 2 layers.
    "llama_gqa": dict(
        cls=(LlamaConfig, LlamaForCausalLM),
        seed=1001,
        cfg=dict(COMMON, vocab_size=256, num_hidden_layers=2, rms_norm_eps=1e-5,
                 rope_theta=10000.0, tie_word_embeddings=False),
    ),
    # Llama with tied embeddings (lm_head.weight == embed_tokens.weight), 3 layers,
    # eps 1e-6, vocab 320 (not a power of two).
    "llama_tied": dict(
        cls=(LlamaConfig, LlamaForCausalLM),
        seed=1002,
        cfg=dict(COMMON, vocab_size=320, num_hidden_layers=3, rms_norm_eps=1e-6,
                 rope_theta=10000.0, tie_word_embeddings=True),
    ),
    # Llama-3 style RoPE scaling. head_dim 16 and theta 5e5 give wavelengths
    # 2*pi*5e5^(i/8) = 6.3, 32.5, 168, ... ; with original_max_position_embeddings
    # 64, low_freq_factor 1, high_freq_factor 4 the thresholds are 16 and 64, so
    # pair 0 is unscaled, pair 1 is in the smooth-interpolation band and pairs
    # 2..7 are divided by factor 8: all three branches are exercised.
    "llama3_scaled": dict(
        cls=(LlamaConfig, LlamaForCausalLM),
        seed=1003,
        cfg=dict(COMMON, vocab_size=256, num_hidden_layers=2, rms_norm_eps=1e-5,
                 tie_word_embeddings=False,
                 rope_theta=500000.0,
                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    ),
    # Qwen2: q/k/v projections have bias, o_proj does not. Untied.
    "qwen2_bias": dict(
        cls=(Qwen2Config, Qwen2ForCausalLM),
        seed=1004,
        cfg=dict(COMMON, vocab_size=256, num_hidden_layers=2, rms_norm_eps=1e-6,
                 rope_theta=1000000.0, tie_word_embeddings=False, use_sliding_window=False),
    ),
    # Qwen3: per-head RMSNorm on q and k (before RoPE), explicit head_dim 32 != 64/4.
    # q_proj: 64 -> 128, k/v_proj: 64 -> 64, o_proj: 128 -> 64. No biases.
    "qwen3_qknorm": dict(
        cls=(Qwen3Config, Qwen3ForCausalLM),
        seed=1005,
        cfg=dict(COMMON, vocab_size=256, num_hidden_layers=2, rms_norm_eps=1e-6, head_dim=32,
                 rope_theta=1000000.0, tie_word_embeddings=False, attention_bias=False,
                 use_sliding_window=False),
    ),
    # Gemma 2: tied scaled embeddings, GeGLU, post-norms, alternating sliding
    # (window 4, shorter than the 12-token prompt) and global layers, attention
    # and final-logit soft caps small enough to bend these logits (5 and 3),
    # query_pre_attn_scalar 24 != head_dim 16.
    "gemma2_softcap": dict(
        cls=(Gemma2Config, Gemma2ForCausalLM),
        seed=1006,
        cfg=dict(GEMMA_COMMON, hidden_activation="gelu_pytorch_tanh", vocab_size=256,
                 num_hidden_layers=3, head_dim=16, rms_norm_eps=1e-6, rope_theta=10000.0,
                 tie_word_embeddings=True, sliding_window=4, query_pre_attn_scalar=24,
                 attn_logit_softcapping=5.0, final_logit_softcapping=3.0),
    ),
    # Gemma 3 (text): as Gemma 2 without soft caps, plus q/k norms, explicit
    # head_dim 32, layers sliding, sliding, global, sliding (pattern 3) with
    # local RoPE base 10000 and global base 1e6.
    "gemma3_swa": dict(
        cls=(Gemma3TextConfig, Gemma3ForCausalLM),
        seed=1007,
        cfg=dict(GEMMA_COMMON, hidden_activation="gelu_pytorch_tanh", vocab_size=256,
                 num_hidden_layers=4, head_dim=32, rms_norm_eps=1e-6, rope_theta=1000000.0,
                 rope_local_base_freq=10000.0, tie_word_embeddings=True, sliding_window=4,
                 query_pre_attn_scalar=32,
                 layer_types=["sliding_attention", "sliding_attention", "full_attention",
                              "sliding_attention"]),
    ),
    # Phi-3: fused qkv_proj and gate_up_proj. LongRoPE in its short regime
    # (max_position_embeddings == original_max_position_embeddings: short
    # factors, attention factor 1), as Phi-3-mini-128k below 4k tokens.
    "phi3_fused": dict(
        cls=(Phi3Config, Phi3ForCausalLM),
        seed=1006,
        cfg=dict(COMMON, vocab_size=256, num_hidden_layers=2, rms_norm_eps=1e-5, rope_theta=10000.0,
                 tie_word_embeddings=False, pad_token_id=None, original_max_position_embeddings=256,
                 rope_scaling={"rope_type": "longrope",
                               "short_factor": [1.0 + 0.1 * i for i in range(8)],
                               "long_factor": [1.0 + 0.5 * i for i in range(8)]}),
    ),
    # Phi-4-mini-like: partial rotary 0.75 (12 of 16 dims), tied embeddings,
    # LongRoPE in its long regime: original 4 < every sequence the goldens run
    # (transformers picks the set per call, by sequence length; specline by
    # context, so both use the long factors here), attention factor
    # sqrt(1 + ln(256/4)/ln 4) = 2.
    "phi4_partial_longrope": dict(
        cls=(Phi3Config, Phi3ForCausalLM),
        seed=1007,
        cfg=dict(COMMON, vocab_size=256, num_hidden_layers=2, rms_norm_eps=1e-5, rope_theta=10000.0,
                 tie_word_embeddings=True, pad_token_id=None, partial_rotary_factor=0.75,
                 original_max_position_embeddings=4,
                 rope_scaling={"rope_type": "longrope",
                               "short_factor": [1.0 + 0.05 * i for i in range(6)],
                               "long_factor": [1.0 + 2.0 * i for i in range(6)]}),
    ),
    # Qwen3-MoE: 8 experts of 32, top 2, renormalised (norm_topk_prob), q/k
    # norm per head, head_dim 32.
    "qwen3moe_tiny": dict(
        cls=(Qwen3MoeConfig, Qwen3MoeForCausalLM),
        seed=1008,
        cfg=dict(COMMON, vocab_size=256, num_hidden_layers=2, rms_norm_eps=1e-6, head_dim=32,
                 rope_theta=1000000.0, tie_word_embeddings=False, attention_bias=False,
                 use_sliding_window=False, num_experts=8, num_experts_per_tok=2,
                 moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
                 mlp_only_layers=[]),
    ),
    # Mixtral: 4 experts of 48, top 2 (softmax over the top-k logits).
    "mixtral_tiny": dict(
        cls=(MixtralConfig, MixtralForCausalLM),
        seed=1009,
        cfg=dict(COMMON, vocab_size=256, num_hidden_layers=2, rms_norm_eps=1e-5, rope_theta=1000000.0,
                 tie_word_embeddings=False, intermediate_size=48, num_local_experts=4,
                 num_experts_per_tok=2, sliding_window=None),
    ),
    # OLMoE: 8 experts of 48, top 2, no renormalisation, q/k RMSNorm over the
    # whole projection.
    "olmoe_tiny": dict(
        cls=(OlmoeConfig, OlmoeForCausalLM),
        seed=1010,
        cfg=dict(COMMON, vocab_size=256, num_hidden_layers=2, rms_norm_eps=1e-5, rope_theta=10000.0,
                 tie_word_embeddings=False, intermediate_size=48, num_experts=8,
                 num_experts_per_tok=2, norm_topk_prob=False, clip_qkv=None, pad_token_id=1),
    ),
}


def init_params(model, seed):
    rng = np.random.Generator(np.random.PCG64(seed))
    params = dict(model.named_parameters())  # tied params appear once
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            shape = tuple(p.shape)
            if name.endswith("norm.weight"):
                # Gemma's RMSNorm multiplies by 1 + w: the same 1 + N(0, 0.1).
                gemma = model.config.model_type.startswith("gemma")
                v = (0.0 if gemma else 1.0) + 0.1 * rng.standard_normal(shape)
            elif "embed_tokens" in name:
                v = (0.1 if model.config.tie_word_embeddings else 0.5) * rng.standard_normal(shape)
            elif name == "lm_head.weight":
                v = 0.12 * rng.standard_normal(shape)
            elif name.endswith(".bias"):
                v = 0.1 * rng.standard_normal(shape)
            elif name.endswith(".weight") or name.endswith("_proj"):
                # "_proj": transformers 5's stacked expert parameters
                # (mlp.experts.gate_up_proj [E, 2h, dim], down_proj).
                v = 0.08 * rng.standard_normal(shape)
            else:
                raise RuntimeError(f"unexpected parameter {name}")
            p.copy_(torch.from_numpy(v.astype(np.float32)))


def build(name, spec, out_root):
    cfg_cls, model_cls = spec["cls"]
    config = cfg_cls(**spec["cfg"])
    torch.manual_seed(0)  # only affects HF's own init, which we overwrite anyway
    model = model_cls(config).to(torch.float32).eval()
    init_params(model, spec["seed"])
    if config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    out = os.path.join(out_root, name)
    files = save_pretrained_clean(model, out)
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in files}
    # Round-trip check: reload and compare every tensor bit-exactly.
    re = model_cls.from_pretrained(out, dtype=torch.float32).eval()
    a, b = model.state_dict(), re.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    print(f"{name}: {sizes}  params={sum(p.numel() for p in model.parameters())}")
    return sizes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "tiny_models"))
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    for name, spec in MODELS.items():
        if args.only and name not in args.only:
            continue
        build(name, spec, args.out)


if __name__ == "__main__":
    sys.exit(main())
