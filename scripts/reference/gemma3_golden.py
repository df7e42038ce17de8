#!/usr/bin/env python3
"""Golden tokenization + greedy continuations for Gemma 3 270M (GGUF Q4_K_M).

Writes tests/data/golden/gemma3_270m.json:
  {"model": file name, "sha256": ..., "max_new_tokens": 32, "reference": ...,
   "prompts": [{"name", "text", "prompt_ids", "generated_ids", "top2_margin",
                "first_step_top10": {"ids", "logits"}}]}

Reference: transformers loads the GGUF (gguf-py dequantizes every tensor to
float32; transformers' Gemma GGUF path subtracts the 1 llama.cpp's converter
added to the norm weights) and its tokenizer from the GGUF vocabulary, and
runs Gemma3ForCausalLM in float32 with eager attention (sliding windows as
the model defines them). Greedy decoding with a KV cache; top2_margin[i] is
the gap between the two best logits at step i (near-ties may flip under a
different summation order). It is a base model: prompts are raw text with
BOS, no chat template.

The GGUF is not in the repository: scripts/setup.sh fetches it into
$MODEL_CACHE (default ~/.cache/specline/models).

Usage: python scripts/reference/gemma3_golden.py [--gguf PATH] [--out PATH]
"""

import argparse
import hashlib
import json
import os
import platform

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_GGUF = os.path.expanduser("~/.cache/specline/models/gemma-3-270m-q4_k_m.gguf")
OUT = os.path.join(REPO, "tests", "data", "golden", "gemma3_270m.json")
MAX_NEW = 32

PROMPTS = [
    ("capital", "The capital of France is"),
    ("story", "Once upon a time, in a small village by the sea,"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("list", "Three facts about the Moon:\n1."),
    ("unicode", "Translate to English: « Je t'aime ☕ et les croissants 🥐 ! » —"),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=DEFAULT_GGUF)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    d, name = os.path.split(args.gguf)
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    out = {
        "model": name,
        "sha256": sha256(args.gguf),
        "max_new_tokens": MAX_NEW,
        "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                     f"float32 eager, {platform.machine()}",
        "prompts": [],
    }
    for pname, text in PROMPTS:
        ids = tok(text, add_special_tokens=True)["input_ids"]
        x = torch.tensor([ids])
        gen, margins, first = [], [], None
        past = None
        with torch.no_grad():
            for step in range(MAX_NEW):
                o = model(input_ids=x, past_key_values=past, use_cache=True)
                past = o.past_key_values
                logits = o.logits[0, -1].double()
                top = torch.topk(logits, 10)
                if first is None:
                    first = {"ids": top.indices.tolist(),
                             "logits": [float(f"{v:.7g}") for v in top.values.tolist()]}
                margins.append(float(f"{(top.values[0] - top.values[1]).item():.6g}"))
                nxt = int(top.indices[0])
                gen.append(nxt)
                if nxt == tok.eos_token_id:
                    break
                x = torch.tensor([[nxt]])
        print(pname, repr(tok.decode(gen)))
        out["prompts"].append({"name": pname, "text": text, "prompt_ids": ids,
                               "generated_ids": gen, "top2_margin": margins,
                               "first_step_top10": first})
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
