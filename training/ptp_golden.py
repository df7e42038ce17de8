#!/usr/bin/env python3
"""Golden file for the C++ PTP implementation: training/tests/data/ptp_golden.json.

From the trained adapter (training/heads/stories260K/ptp) on stories260K, for
a fixed prompt and seed:
  - the u values of the first generated indices (u_value(seed, t));
  - a trace of the first calls of ptp_generate (layout "last", greedy and
    T=1): per call the committed length, verify tokens, the u of the verify
    rows and of the auxiliary rows, the proposals, the teacher tokens, the
    accepted count and the committed tokens;
  - call 0 in full numbers: the u_embed inputs of its auxiliary rows, the
    teacher logits of its verify row(s) and the auxiliary logits;
  - the full generated sequences (greedy, T=1, T=0.8/top-k 40/top-p 0.9) of
    ptp_generate, each equal to plain_generate (checked here), with the
    number of calls.

  python3 training/ptp_golden.py [--head DIR] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from specline_train.model import Llama2cTokenizer, load_model  # noqa: E402
from specline_train.ptp import (inverse_cdf, load_ptp, piecewise_linear_3, plain_generate,  # noqa: E402
                                ptp_generate, u_value, u_values, verify, warp)

REPO = os.path.abspath(os.path.join(HERE, ".."))
MODEL = os.path.join(REPO, "..", "shared", "models", "stories260K", "stories260K.bin")
TOKENIZER = os.path.join(REPO, "..", "shared", "models", "stories260K", "tok512.bin")
HEAD = os.path.join(HERE, "heads", "stories260K", "ptp")
OUT = os.path.join(HERE, "tests", "data", "ptp_golden.json")
TEXT = "Once upon a time"
SEED = 42
STEPS = 48
SETTINGS = [("greedy", 0.0, 0, 1.0), ("t1", 1.0, 0, 1.0), ("t08_k40_p09", 0.8, 40, 0.9)]


def rnd(t: torch.Tensor, nd: int = 6):
    return [round(float(x), nd) for x in t.flatten().tolist()] if t.dim() <= 1 else [rnd(r, nd) for r in t]


@torch.no_grad()
def trace_calls(model, prompt, temperature, top_k, top_p, seed, n_calls):
    """The first n_calls of ptp_generate (layout "last"), step by step (the
    same logic as ptp_generate, unrolled to record every quantity)."""
    N = model.n_aux
    x, pending, out = list(prompt), [], []
    for c in range(n_calls):
        n, m = len(x), len(pending)
        t0 = n - len(prompt)
        vt = [x[-1]] + pending
        aux_u = u_values(seed, t0 + m, N)
        r = model.forward_call(x[:-1], vt, aux_u)
        vu = u_values(seed, t0, m + 1)
        a, toks = verify(r["teacher_logits"], pending, vu, temperature, top_k, top_p)
        teacher_tokens = [inverse_cdf(warp(r["teacher_logits"][j], temperature, top_k, top_p), vu[j])
                          for j in range(m + 1)]
        props = r["proposals"]
        rec = {"call": c, "committed_len": n, "generated_index_of_first_verify_target": t0,
               "prefix_len": n - 1, "verify_tokens": vt, "verify_u": vu, "aux_positions": list(range(n + m, n + m + N)),
               "aux_u": aux_u, "proposals": props, "teacher_tokens": teacher_tokens, "accepted": a,
               "committed_tokens": toks, "next_pending": props[1:] if (a == m and props[0] == toks[-1]) else []}
        if c == 0:
            rec["aux_input_embeds"] = rnd(piecewise_linear_3(torch.tensor(aux_u, dtype=torch.float32),
                                                             model.u_embed))
            rec["teacher_logits"] = rnd(r["teacher_logits"])
            rec["aux_logits"] = rnd(r["aux_logits"])
        out.append(rec)
        x += toks
        pending = rec["next_pending"]
    return out


def build(head: str = HEAD) -> dict:
    torch.set_num_threads(1)
    base = load_model(MODEL)
    model = load_ptp(head, base)
    tok = Llama2cTokenizer(TOKENIZER)
    prompt = [1] + tok.encode(TEXT)
    g = {"description": "PTP golden (docs/ptp.md): stories260K + training/heads/stories260K/ptp, layout "
                        "'last'; u_t = u_value(seed, t), t = generated-token index",
         "head": os.path.relpath(head, REPO), "head_json_ptp": model.meta["ptp"],
         "prompt_text": TEXT, "prompt": prompt, "seed": SEED, "n_aux": model.n_aux,
         "u_first_16": u_values(SEED, 0, 16),
         "u_check": {"seed": 0, "t0": u_value(0, 0), "seed_1234567_t0": u_value(1234567, 0)},
         "traces": {}, "sequences": {}}
    for name, T, k, p in SETTINGS:
        if name != "t08_k40_p09":
            g["traces"][name] = {"temperature": T, "top_k": k, "top_p": p,
                                 "calls": trace_calls(model, prompt, T, k, p, SEED, 8)}
        st: dict = {}
        seq = ptp_generate(model, prompt, STEPS, T, k, p, seed=SEED, stats=st)
        ref = plain_generate(base, prompt, STEPS, T, k, p, seed=SEED)
        if seq != ref:
            raise SystemExit(f"{name}: ptp_generate differs from plain_generate: {seq} vs {ref}")
        g["sequences"][name] = {"temperature": T, "top_k": k, "top_p": p, "steps": STEPS, "tokens": seq,
                                "calls": st["calls"], "tokens_per_call": st["per_call"],
                                "text": b"".join(tok.piece(a, b) for a, b in zip([prompt[-1]] + seq, seq))
                                .decode("utf-8", "replace")}
    return g


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--head", default=HEAD)
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    g = build(a.head)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(g, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {a.out} ({os.path.getsize(a.out)} bytes)")
    for name, s in g["sequences"].items():
        print(f"{name}: {s['steps']} tokens in {s['calls']} calls: {s['text']!r}")


if __name__ == "__main__":
    sys.exit(main())
