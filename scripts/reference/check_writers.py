#!/usr/bin/env python3
"""Checks specline's model writers against independent Python readers.

Usage (scripts/test.sh runs it after ctest, with training/setup.sh's Python:
numpy, gguf, safetensors and torch; `python3` on PATH may lack them):
  build/tests/formats_test --gtest_filter=Formats.WriteSamplesForPythonCheck
  $(bash training/setup.sh | tail -1) scripts/reference/check_writers.py build/writer-samples [--transformers]
(the test writes to $SPECLINE_WRITER_SAMPLES when set, else <build>/writer-samples).

What it checks (each file is written from the same logical model, seed 42):
  * every .gguf opens with the `gguf` package; its metadata and tensor
    directory are as expected, and quantized/f16/bf16 tensors dequantized by
    `gguf.quants` match the F32 file within the dtype's precision;
  * model.safetensors opens with `safetensors`; applying llama.cpp's
    convert_hf_to_gguf `permute` to the Hugging Face q/k weights gives exactly
    the GGUF "llama" tensors (qwen2/qwen3 GGUFs are not permuted);
  * the llama2.c .bin, parsed here with numpy, holds the GGUF tensors;
  * with --transformers (by hand: a Python with transformers >= 4.51 and
    accelerate, which the training venv over Debian's torch 1.13 cannot
    have): transformers loads each Hugging Face directory and the GGUF
    files, and the logits agree. Not run by scripts/test.sh, whose checks
    never pass by skipping; with the flag, a missing package fails.
Exits non-zero on the first mismatch, and when any sample is missing.
"""
import json
import os
import sys

import numpy as np

import gguf
from gguf import quants
from safetensors.numpy import load_file


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py LlamaModel.permute (HF -> GGUF)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_tensors(path):
    r = gguf.GGUFReader(path)
    out = {}
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        vals = quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        out[t.name] = vals.reshape(shape)
    return r, out


def field(r, key):
    f = r.fields[key]
    v = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode()
    return v[0]


HF_TO_GGUF = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    layer, rest, suffix = parts[2], ".".join(parts[3:-1]), parts[-1]
    return f"blk.{layer}.{HF_TO_GGUF[rest]}.{suffix}"


def check_hf_vs_gguf(hf_dir, gguf_path, permuted):
    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    hf = load_file(os.path.join(hf_dir, "model.safetensors"))
    r, g = gguf_tensors(gguf_path)
    arch = field(r, "general.architecture")
    if arch != cfg["model_type"]:
        fail(f"{gguf_path}: arch {arch} vs {cfg['model_type']}")
    for key, ck in [("embedding_length", "hidden_size"), ("block_count", "num_hidden_layers"),
                    ("attention.head_count", "num_attention_heads"),
                    ("attention.head_count_kv", "num_key_value_heads"),
                    ("feed_forward_length", "intermediate_size")]:
        if int(field(r, f"{arch}.{key}")) != cfg[ck]:
            fail(f"{gguf_path}: {key} differs from config.json {ck}")
    if set(gguf_name(n) for n in hf) != set(g):
        fail(f"{gguf_path}: tensor names differ from {hf_dir}")
    for name, w in hf.items():
        w = w.astype(np.float32)
        if permuted and ".q_proj." in name:
            w = permute(w, cfg["num_attention_heads"])
        if permuted and ".k_proj." in name:
            w = permute(w, cfg["num_key_value_heads"])
        if not np.array_equal(w, g[gguf_name(name)]):
            fail(f"{gguf_path}: {gguf_name(name)} != permuted {name} of {hf_dir}")
    print(f"ok  {gguf_path}: {len(g)} tensors equal the HF model "
          f"({'with' if permuted else 'without'} llama.cpp's q/k permute)")
    return g


def check_dtypes(d, ref):
    tol = {"F16": 1e-3, "BF16": 8e-3, "Q8_0": 1e-2, "Q4_0": 0.16, "Q4_1": 0.08,
           "Q5_0": 0.08, "Q5_1": 0.04}
    for name, t in tol.items():
        path = os.path.join(d, f"llama-{name}.gguf")
        r, g = gguf_tensors(path)
        types = {x.name: x.tensor_type.name for x in r.tensors}
        for tn, v in g.items():
            want = ref[tn]
            if v.shape != want.shape:
                fail(f"{path}: {tn} shape {v.shape} vs {want.shape}")
            expect_type = name if want.ndim == 2 else "F32"
            if types[tn] != expect_type:
                fail(f"{path}: {tn} has type {types[tn]}, expected {expect_type}")
            err = np.abs(v - want).max() / np.abs(want).max()
            if err > t:
                fail(f"{path}: {tn} dequantized error {err:.4f} > {t}")
        print(f"ok  {path}: gguf.quants dequantizes every tensor to the F32 values (tol {t})")


def check_llama2c(path, ref, cfg):
    raw = np.fromfile(path, dtype=np.int32, count=7)
    dim, hidden, L, heads, kv, vocab, seq = (int(x) for x in raw)
    if (dim, hidden, L, heads, kv, abs(vocab)) != (
            cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"],
            cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]):
        fail(f"{path}: header {raw}")
    data = np.fromfile(path, dtype=np.float32, offset=28)
    hd = dim // heads
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        out = data[pos:pos + n].reshape(shape)
        pos += n
        return out

    got = {"token_embd.weight": take(abs(vocab), dim)}
    order = [("attn_norm", (dim,)), ("attn_q", (dim, dim)), ("attn_k", (kv * hd, dim)),
             ("attn_v", (kv * hd, dim)), ("attn_output", (dim, dim)), ("ffn_norm", (dim,)),
             ("ffn_gate", (hidden, dim)), ("ffn_down", (dim, hidden)), ("ffn_up", (hidden, dim))]
    for stem, shape in order:
        stacked = take(L, *shape)
        for l in range(L):
            got[f"blk.{l}.{stem}.weight"] = stacked[l]
    got["output_norm.weight"] = take(dim)
    take(seq, hd // 2)
    take(seq, hd // 2)
    if vocab < 0:
        got["output.weight"] = take(abs(vocab), dim)
    if pos != data.size:
        fail(f"{path}: {data.size - pos} floats left over")
    for k, v in got.items():
        if not np.array_equal(v, ref[k]):
            fail(f"{path}: {k} differs from the GGUF")
    print(f"ok  {path}: parsed with numpy, all {len(got)} tensors equal the GGUF's")


def check_bf16(d):
    # numpy has no bfloat16; read through safetensors' torch binding.
    from safetensors.torch import load_file as load_torch
    bf = load_torch(os.path.join(d, "llama-hf-bf16", "model.safetensors"))
    f32 = load_file(os.path.join(d, "llama-hf", "model.safetensors"))
    for name, t in bf.items():
        if str(t.dtype) != "torch.bfloat16":
            fail(f"llama-hf-bf16: {name} is {t.dtype}")
        want = f32[name]
        err = np.abs(t.float().numpy() - want).max() / np.abs(want).max()
        if err > 8e-3:
            fail(f"llama-hf-bf16: {name} error {err}")
    print(f"ok  llama-hf-bf16: safetensors(torch) reads {len(bf)} bf16 tensors "
          "matching the fp32 model")


def check_transformers(d):
    try:
        import torch
        import transformers
    except ImportError as e:
        fail(f"--transformers: {e}")
    ids = torch.tensor([[1, 5, 9, 2, 7, 3, 11, 4]])
    for name, ggufs in [("llama-hf", ["llama-F32.gguf"]), ("qwen2-hf", ["qwen2-F32.gguf"]),
                        ("qwen3-hf", ["qwen3-F32.gguf"]), ("llama-hf-bf16", [])]:
        hf_dir = os.path.join(d, name)
        model = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype=torch.float32)
        with torch.no_grad():
            ref = model(ids).logits
        print(f"ok  transformers loads {hf_dir} ({type(model).__name__}); "
              f"logits std {ref.std().item():.3f}")
        for g in ggufs:
            m2 = transformers.AutoModelForCausalLM.from_pretrained(
                d, gguf_file=g, torch_dtype=torch.float32)
            with torch.no_grad():
                got = m2(ids).logits
            diff = (got - ref).abs().max().item()
            if diff > 1e-4:
                fail(f"transformers logits from {g} differ from {name} by {diff}")
            print(f"ok  transformers loads {g}: logits match {name} (max diff {diff:.2e})")


# What Formats.WriteSamplesForPythonCheck writes: every one is required.
SAMPLES = ["llama.bin", "llama-F32.gguf", "llama-F16.gguf", "llama-BF16.gguf", "llama-Q8_0.gguf",
           "llama-Q4_0.gguf", "llama-Q4_1.gguf", "llama-Q5_0.gguf", "llama-Q5_1.gguf", "llama-hf/config.json", "llama-hf/model.safetensors",
           "llama-hf-bf16/config.json", "llama-hf-bf16/model.safetensors", "qwen3-F32.gguf",
           "qwen3-hf/config.json", "qwen3-hf/model.safetensors", "qwen2-F32.gguf",
           "qwen2-hf/config.json", "qwen2-hf/model.safetensors"]


def main():
    args = [a for a in sys.argv[1:] if a != "--transformers"]
    d = args[0] if args else os.environ.get("SPECLINE_WRITER_SAMPLES", "")
    if not d or not os.path.isdir(d):
        fail(f"no samples directory {d!r}: run Formats.WriteSamplesForPythonCheck first (see the docstring)")
    missing = [s for s in SAMPLES if not os.path.isfile(os.path.join(d, s)) or
               os.path.getsize(os.path.join(d, s)) == 0]
    if missing:
        fail(f"{d}: samples missing or empty: {', '.join(missing)}")
    cfg = json.load(open(os.path.join(d, "llama-hf", "config.json")))
    ref = check_hf_vs_gguf(os.path.join(d, "llama-hf"), os.path.join(d, "llama-F32.gguf"), True)
    check_hf_vs_gguf(os.path.join(d, "qwen3-hf"), os.path.join(d, "qwen3-F32.gguf"), False)
    check_hf_vs_gguf(os.path.join(d, "qwen2-hf"), os.path.join(d, "qwen2-F32.gguf"), False)
    check_dtypes(d, ref)
    check_llama2c(os.path.join(d, "llama.bin"), ref, cfg)
    check_bf16(d)
    if "--transformers" in sys.argv[1:]:
        check_transformers(d)
    print("all writer checks passed")


if __name__ == "__main__":
    main()
