#!/usr/bin/env python3
"""PIPO report: acceptance of the second token, tokens per backbone step and
the quality loss against the base model, at several tau and prompt lengths.

For each prompt length P (BOS + P-1 tokens the base samples at T=1, seed
1000+i for prompt i), temperature T (0 = greedy, 1) and tau:
  accept          accepted second tokens / PIPO steps (one backbone pass per step)
  tokens_per_step emitted tokens / steps (1 .. 2; prefill excluded)
  ll_pipo         mean base-model log-likelihood per token of PIPO's output
                  (log p_base(x_t | prompt, x_<t), the original base, T=1 scoring)
  ll_base         the same for the base model's own continuation of the same
                  prompt with the same T and seed (torch.Generator(seed i))
  quality_loss    ll_base - ll_pipo (nats/token; > 0: PIPO's text is less
                  likely under the base)
plus, for comparison, "random" rows: the same PIPO model with the confidence
head replaced by a coin flip with the acceptance rate measured at that tau
(the paper's Random baseline, Figure 6).

  python3 training/report_pipo.py --model ../shared/models/stories260K/stories260K.bin \
      --head training/heads/stories260K/pipo     # JSON -> bench/results/pipo_stories260K_<date>.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from specline_train.model import Llama, file_sha256, load_llama2c, sample_batch, sample_next  # noqa: E402
from specline_train.pipo import (load_pipo, pad_prompt, pipo_feed, pipo_generate, pipo_heads,  # noqa: E402
                                 pipo_prefill)
from train_ppsd import machine  # noqa: E402


@torch.no_grad()
def base_ll(base: Llama, prompt: list, out: list) -> float:
    """Sum of log p_base(out_t | prompt, out_<t)."""
    seq = torch.tensor([prompt + out])
    lp = torch.log_softmax(base(seq)[0][0].float(), -1)
    P = len(prompt)
    return float(lp[P - 1:P - 1 + len(out)].gather(-1, torch.tensor(out)[:, None]).sum())


@torch.no_grad()
def random_accept_generate(model, prompt, max_tokens, rate, temperature, seed):
    """PIPO decoding with the confidence head replaced by a coin flip
    (probability `rate`, its own generator), token2 drawn only if accepted."""
    g = torch.Generator().manual_seed(seed)
    coin = torch.Generator().manual_seed(seed + 777)
    st = pipo_prefill(model, torch.tensor([pad_prompt(prompt, model.pad_id)]))
    out, steps, acc = [], 0, 0
    while len(out) < max_tokens:
        r = pipo_heads(model, st, 2.0, temperature, g)             # tau 2: the heads never accept
        t1 = r["t1"]
        t2 = torch.full_like(t1, model.pad_id)
        steps += 1
        if torch.rand(1, generator=coin).item() < rate:
            t2 = sample_next(r["logits2"], temperature, 1.0, g)
            out += [int(t1[0]), int(t2[0])]
            acc += 1
        else:
            out.append(int(t1[0]))
        if len(out) >= max_tokens:
            break
        pipo_feed(model, st, t1, t2)
    return out[:max_tokens], steps, acc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "shared", "models", "stories260K",
                                                    "stories260K.bin"))
    ap.add_argument("--head", default=os.path.join(HERE, "heads", "stories260K", "pipo"))
    ap.add_argument("--out", help="JSON (default bench/results/pipo_stories260K_<date>.json)")
    ap.add_argument("--prompts", type=int, default=12, help="prompts per prompt length")
    ap.add_argument("--tokens", type=int, default=64, help="generated tokens per prompt")
    ap.add_argument("--prompt-lens", default="1,4,9", help="prompt lengths (BOS included)")
    ap.add_argument("--taus", default="0,0.5,0.8,0.9,0.95,0.98,1.01")
    ap.add_argument("--random-taus", default="0.5,0.9,0.95", help="taus that get a Random baseline row")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--machine-note", default="2-core CPU VM (dev-cpu), shared with a CI job")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    t0 = time.time()
    base = load_llama2c(a.model)
    for p in base.parameters():
        p.requires_grad_(False)
    model = load_pipo(a.head, base)
    lens = [int(x) for x in a.prompt_lens.split(",")]
    taus = [float(x) for x in a.taus.split(",")]
    rtaus = [float(x) for x in a.random_taus.split(",") if x]
    temps = [float(x) for x in a.temperatures.split(",")]
    rows = []
    for P in lens:
        prompts = []
        for i in range(a.prompts):
            g = torch.Generator().manual_seed(1000 + i)
            p = [1]
            while len(p) < P:            # base samples, re-drawn past the PAD id
                t = int(sample_batch(base, torch.tensor([p]), 1, 1.0, 1.0, g)[0, 0])
                if t != model.pad_id:
                    p.append(t)
            prompts.append(p)
        for T in temps:
            ref_ll = ref_n = 0.0
            for i, p in enumerate(prompts):
                g = torch.Generator().manual_seed(i)
                out = base.generate(p, a.tokens, T, 1.0, g)
                ref_ll += base_ll(base, p, out)
                ref_n += len(out)
            ll_base = ref_ll / ref_n
            acc_at = {}
            for tau in taus:
                steps = acc = toks = 0
                ll = 0.0
                for i, p in enumerate(prompts):
                    r = pipo_generate(model, p, a.tokens, tau, T, i, return_info=True)
                    steps += len(r["steps"])
                    acc += sum(s["accepted"] for s in r["steps"])
                    toks += len(r["tokens"])
                    ll += base_ll(base, p, r["tokens"])
                acc_at[tau] = acc / steps
                rows.append({"prompt_len": P, "temperature": T, "tau": tau, "accept": round(acc / steps, 4),
                             "tokens_per_step": round(toks / steps, 4), "ll_pipo": round(ll / toks, 4),
                             "ll_base": round(ll_base, 4), "quality_loss": round(ll_base - ll / toks, 4),
                             "steps": steps, "tokens": toks, "kind": "confidence"})
                print(json.dumps(rows[-1]), flush=True)
            for tau in rtaus:
                if tau not in acc_at:
                    continue
                steps = acc = toks = 0
                ll = 0.0
                for i, p in enumerate(prompts):
                    out, s, c = random_accept_generate(model, p, a.tokens, acc_at[tau], T, i)
                    steps, acc, toks = steps + s, acc + c, toks + len(out)
                    ll += base_ll(base, p, out)
                rows.append({"prompt_len": P, "temperature": T, "tau": tau, "accept": round(acc / steps, 4),
                             "tokens_per_step": round(toks / steps, 4), "ll_pipo": round(ll / toks, 4),
                             "ll_base": round(ll_base, 4), "quality_loss": round(ll_base - ll / toks, 4),
                             "steps": steps, "tokens": toks, "kind": "random (rate = confidence's accept)"})
                print(json.dumps(rows[-1]), flush=True)
    with open(os.path.join(a.head, "head.json")) as f:
        hj = json.load(f)
    date = datetime.date.today().isoformat()
    res = {"what": "PIPO stories260K: second-token acceptance, tokens per backbone step, quality loss vs base",
           "date": date, "machine": a.machine_note + "; " + machine("cpu"),
           "command": "python3 training/report_pipo.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "model": os.path.basename(a.model), "model_sha256": file_sha256(a.model),
           "head": os.path.relpath(a.head, os.path.dirname(HERE)),
           "head_steps": hj["metadata"].get("steps"), "prompts_per_len": a.prompts, "tokens": a.tokens,
           "definitions": {"accept": "accepted second tokens / steps", "tokens_per_step": "emitted / steps",
                           "ll": "mean log p_base per generated token", "quality_loss": "ll_base - ll_pipo"},
           "rows": rows, "seconds": round(time.time() - t0, 1)}
    out = a.out or os.path.join(HERE, "..", "bench", "results", f"pipo_stories260K_{date}.json")
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    print(f"wrote {out} in {res['seconds']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
