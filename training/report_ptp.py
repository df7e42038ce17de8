#!/usr/bin/env python3
"""PTP report: accepted tokens per call of a trained adapter for N = 1..n_aux,
at T=0 and T=1, next to the PTP paper's Table 3; JSON to
bench/results/ptp_stories260K_<date>.json.

Columns:
  offline T=1   teacher-forced on held-out teacher completions (T=1), u
                inside the teacher's CDF bins: mean min(#correct + 1, N), the
                paper's #accepted (Eq. 16-17);
  decode T=0/1  the lossless decoder ptp_generate (layout "last", and
                "all" = one proposal group per acceptance count) from
                held-out prompts: generated tokens / PTP calls. Each decode
                is checked against plain_generate (same tokens).
The speedup bound is tokens per call: plain decoding needs one call per
token; a PTP call costs more rows (m + 1 verify + N auxiliary, or
(m + 1) N auxiliary with "all") but, while rows are cheaper than calls,
latency scales with calls.

  python3 training/report_ptp.py [--head training/heads/stories260K/ptp]
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
import train_ptp  # noqa: E402
from specline_train.model import load_model  # noqa: E402
from specline_train.ptp import load_ptp, plain_generate, ptp_generate  # noqa: E402
from train_ppsd import machine, make_data  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, ".."))
MODEL = os.path.join(REPO, "..", "shared", "models", "stories260K", "stories260K.bin")
HEAD = os.path.join(HERE, "heads", "stories260K", "ptp")

# PTP paper, Table 3: average accepted tokens per step under teacher
# verification on SpecBench, Vicuna-7B teacher, temperature 0.7 (task average
# column; O-PTP is the authors' gated-LoRA r=128, N=16 model).
PAPER_TABLE3 = {"O-PTP (ours), Vicuna-7B": 4.18, "SAMD": 3.90, "Eagle-2": 3.86, "Hydra": 3.37, "Eagle": 3.19,
                "Medusa": 2.36, "SpS": 1.94, "Recycling": 2.70, "PLD": 1.73, "Lookahead": 1.56, "None": 1.00}
PAPER_TABLE3_TASKS = {"O-PTP": {"MTC": 4.52, "TL": 3.73, "SUM": 4.54, "QA": 3.42, "Math": 4.62, "RAG": 4.29}}


def decode(model, prompts, gen, T, N, layout, refs, seed0):
    st: dict = {}
    lossless = True
    for j, p in enumerate(prompts):
        got = ptp_generate(model, p, gen, T, 0, 1.0, seed=seed0 + j, n_aux=N, layout=layout, stats=st)
        lossless &= got == refs[(T, j)]
    return st["tokens"] / st["calls"], st["calls"], st["tokens"], lossless


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--head", default=HEAD)
    ap.add_argument("--prompts", type=int, default=16, help="held-out prompts for decoding")
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--gen-tokens", type=int, default=48)
    ap.add_argument("--offline-sequences", type=int, default=64)
    ap.add_argument("--offline-groups", type=int, default=32, help="split points per offline sequence")
    ap.add_argument("--seed", type=int, default=1_000_003, help="held-out data seed (train_ppsd's eval seed)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--out", help="JSON path (default bench/results/ptp_stories260K_<date>.json)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    t0 = time.time()
    base = load_model(a.model)
    model = load_ptp(a.head, base)
    Nmax = model.n_aux
    torch.manual_seed(0)
    tok, mask = make_data(base, [[1]], a.offline_sequences, 128, 1.0, 1.0, a.seed)
    prompts = [tok[i, :a.prompt_len].tolist() for i in range(min(a.prompts, len(tok)))]
    refs = {(T, j): plain_generate(base, p, a.gen_tokens, T, seed=a.seed + j)
            for T in (0.0, 1.0) for j, p in enumerate(prompts)}
    # offline: correct prefix lengths at N = Nmax, then truncated per N
    g = torch.Generator().manual_seed(a.seed)
    correct = []
    with torch.no_grad():
        for i in range(0, len(tok), 8):
            _, c = train_ptp.batch_loss(model, tok[i:i + 8], mask[i:i + 8], Nmax, a.offline_groups, g, 1.0, 0,
                                        1.0, True)
            correct.append(c.flatten())
    c = torch.cat(correct).float()
    rows = []
    for N in range(1, Nmax + 1):
        acc = torch.clamp(torch.clamp(c, max=N) + 1, max=N)
        r = {"N": N, "offline_T1": float(acc.mean()), "offline_T1_stderr": float(acc.std() / len(acc) ** 0.5)}
        for T in (0.0, 1.0):
            tpc, calls, toks, ok = decode(model, prompts, a.gen_tokens, T, N, "last", refs, a.seed)
            r[f"decode_T{T:g}"] = {"tokens_per_call": tpc, "calls": calls, "tokens": toks, "lossless": ok}
        rows.append(r)
    extra = {}
    for T in (0.0, 1.0):
        tpc, calls, toks, ok = decode(model, prompts, a.gen_tokens, T, Nmax, "all", refs, a.seed)
        extra[f"decode_all_T{T:g}"] = {"N": Nmax, "tokens_per_call": tpc, "calls": calls, "tokens": toks,
                                       "lossless": ok}

    print(f"PTP adapter {os.path.relpath(a.head, REPO)} on stories260K "
          f"(n_aux {Nmax}, LoRA r {model.lora_rank}, steps {model.meta['metadata'].get('steps')})")
    print(f"held-out: offline {len(c)} calls over {len(tok)} T=1 completions; decoding {len(prompts)} prompts "
          f"x {a.gen_tokens} tokens; tokens/call = speedup bound in calls")
    print()
    print("| N | offline T=1 accepted/call | decode T=0 tokens/call | decode T=1 tokens/call | lossless |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['N']} | {r['offline_T1']:.3f} +- {r['offline_T1_stderr']:.3f} | "
              f"{r['decode_T0']['tokens_per_call']:.3f} "
              f"({r['decode_T0']['calls']} calls) | {r['decode_T1']['tokens_per_call']:.3f} "
              f"({r['decode_T1']['calls']} calls) | "
              f"{'yes' if r['decode_T0']['lossless'] and r['decode_T1']['lossless'] else 'NO'} |")
    e0, e1 = extra["decode_all_T0"], extra["decode_all_T1"]
    print(f"| {Nmax}, layout all | - | {e0['tokens_per_call']:.3f} ({e0['calls']} calls) | "
          f"{e1['tokens_per_call']:.3f} ({e1['calls']} calls) | "
          f"{'yes' if e0['lossless'] and e1['lossless'] else 'NO'} |")
    print()
    print("PTP paper, Table 3 (SpecBench, Vicuna-7B teacher, T=0.7, accepted tokens per step, task average):")
    for k, v in PAPER_TABLE3.items():
        print(f"  {k:28s} {v:.2f}")
    print(f"  O-PTP per task: {PAPER_TABLE3_TASKS['O-PTP']}")
    res = {"date": a.date, "machine": machine("cpu"), "model": "stories260K", "head": os.path.relpath(a.head, REPO),
           "head_ptp": model.meta["ptp"], "head_steps": model.meta["metadata"].get("steps"),
           "settings": {"prompts": len(prompts), "prompt_len": a.prompt_len, "gen_tokens": a.gen_tokens,
                        "offline_sequences": len(tok), "offline_groups": a.offline_groups,
                        "offline_calls": len(c), "seed": a.seed},
           "rows": rows, "layout_all": extra, "paper_table3_task_average": PAPER_TABLE3,
           "paper_table3_optp_tasks": PAPER_TABLE3_TASKS, "seconds": round(time.time() - t0, 1)}
    out = a.out or os.path.join(REPO, "bench", "results", f"ptp_stories260K_{a.date}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    print(f"\nwrote {os.path.relpath(out, REPO)} ({res['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
