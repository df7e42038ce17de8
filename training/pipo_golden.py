#!/usr/bin/env python3
"""Golden values of the PIPO reference decoder for the C++ implementation
(docs/pipo.md): training/tests/data/pipo_golden.json.

For the trained stories260K PIPO export (training/heads/stories260K/pipo:
head.json, head.safetensors, backbone.bin) and a fixed prompt (BOS + run.c's
encoding of " Once upon a time, there was a little", an odd length, so it is
padded with one PAD):
  - the padded prompt;
  - the compressor output of the first pair: first 8 values, L2 norm, and
    the norm of a + b (the init) for scale; the same for the padded last
    prompt pair (x, PAD);
  - h_b (backbone output, pre-norm) of the last prompt pair: first 8 values,
    norm, and the top-5 logits1;
  - the first 8 greedy steps at tau = 0.95: token1, token2 (the MTP argmax,
    reported whether accepted or not), confidence, accepted, and the max
    logit of each head;
  - full greedy outputs (64 tokens, PAD-free) and the pair streams at
    tau = 0.95, tau = 1.01 (never accept) and tau = 0 (always accept), and
    at tau = 0.95 for a second, even-length prompt (no padding).
All in float32 as computed by PyTorch on the CPU; compare floats at ~1e-4
relative, tokens exactly.

  python3 training/pipo_golden.py            # writes training/tests/data/pipo_golden.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from specline_train.model import Llama2cTokenizer, load_llama2c  # noqa: E402
from specline_train.pipo import (load_pipo, pad_prompt, pipo_feed, pipo_generate, pipo_heads,  # noqa: E402
                                 pipo_prefill)

MODEL = os.path.join(REPO, "..", "shared", "models", "stories260K", "stories260K.bin")
TOKENIZER = os.path.join(REPO, "..", "shared", "models", "stories260K", "tok512.bin")
HEAD = os.path.join(HERE, "heads", "stories260K", "pipo")
OUT = os.path.join(HERE, "tests", "data", "pipo_golden.json")
TEXT = " Once upon a time, there was a little girl"
TEXT_EVEN = " The cat sat"
MAX_TOKENS = 64


def r6(x):
    return [round(float(v), 6) for v in x]


def prompt_ids(tok, text):
    return [1] + tok.encode(text)


@torch.no_grad()
def compute_golden(model, prompt: list, prompt_even: list) -> dict:
    model.eval()
    pad = model.pad_id
    padded = pad_prompt(prompt, pad)
    E = model.backbone.model.embed_tokens.weight

    def comp(a, b):
        z = model.compressor(torch.cat([E[a], E[b]]))
        return {"tokens": [a, b], "first8": r6(z[:8]), "norm": round(float(z.norm()), 6),
                "sum_norm": round(float((E[a] + E[b]).norm()), 6)}

    st = pipo_prefill(model, torch.tensor([padded]))
    top = torch.topk(st.logits1[0], 5)
    g = {
        "model": "../shared/models/stories260K/stories260K.bin (base; the backbone is backbone.bin)",
        "head": "training/heads/stories260K/pipo",
        "pad_id": pad,
        "prompt_text": TEXT,
        "prompt": prompt,
        "padded_prompt": padded,
        "compressor_first_pair": comp(padded[0], padded[1]),
        "compressor_last_prompt_pair": comp(padded[-2], padded[-1]),
        "h_b_last_prompt_pair": {"pair_position": len(padded) // 2 - 1, "first8": r6(st.h_last[0, :8]),
                                 "norm": round(float(st.h_last[0].norm()), 6),
                                 "logits1_top5": {"ids": top.indices.tolist(), "values": r6(top.values)}},
    }
    info = pipo_generate(model, prompt, MAX_TOKENS, 0.95, 0.0, 0, return_info=True)
    steps = []
    # the first steps again, one call at a time, for the per-step head maxima
    st = pipo_prefill(model, torch.tensor([padded]))
    for k in range(8):
        r = pipo_heads(model, st, 0.95, 0.0)
        steps.append({"step": k, "pair_position": st.pairs - 1, "t1": int(r["t1"][0]),
                      "t2": int(r["t2_proposed"][0]), "conf": round(float(r["conf"][0]), 6),
                      "accepted": bool(r["accepted"][0]),
                      "logits1_max": round(float(r["logits1"][0].max()), 5),
                      "logits2_max": round(float(r["logits2"][0].max()), 5)})
        pipo_feed(model, st, r["t1"], r["t2"])
    g["first_steps_tau_0.95"] = steps
    runs = {}
    for name, p, tau in (("tau_0.95", prompt, 0.95), ("tau_1.01", prompt, 1.01), ("tau_0", prompt, 0.0),
                         ("even_prompt_tau_0.95", prompt_even, 0.95)):
        i = info if name == "tau_0.95" else pipo_generate(model, p, MAX_TOKENS, tau, 0.0, 0, return_info=True)
        runs[name] = {"prompt": p, "tau": tau, "max_tokens": MAX_TOKENS, "tokens": i["tokens"],
                      "stream": i["stream"], "steps": len(i["steps"]),
                      "accepted": sum(s["accepted"] for s in i["steps"])}
    g["greedy"] = runs
    return g


def load(head=HEAD, model_path=MODEL):
    base = load_llama2c(model_path)
    for p in base.parameters():
        p.requires_grad_(False)
    return base, load_pipo(head, base)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head", default=HEAD)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    tok = Llama2cTokenizer(TOKENIZER)
    _, model = load(a.head, a.model)
    g = compute_golden(model, prompt_ids(tok, TEXT), prompt_ids(tok, TEXT_EVEN))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
