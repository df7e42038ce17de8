"""Golden values for the sampler's logit processing and logprobs.

Writes tests/data/sampling/penalties_golden.json: random logit rows with a
history, a prompt length and settings, and what an independent NumPy float64
implementation of the documented semantics gives for them:
  processed   logits after logit_bias, the token mask, the repetition penalty
              (HF: whole history, each token once) and OpenAI's presence and
              frequency penalties (generated tokens only);
  probs       the sampled distribution: softmax(processed / T), then top-k,
              top-p and min-p, renormalised (one-hot argmax when greedy);
  logprobs    log_softmax(processed / T') with T' = T, or 1 when greedy
              (docs/openai_api.md "logprobs": before truncation).
Read by tests/sampler_penalties_test.cc. numpy only; run from the repository
root: python scripts/reference/penalties_golden.py
"""
import json

import numpy as np

OUT = "tests/data/sampling/penalties_golden.json"


def process(z, hist, prompt_len, s):
    z = z.astype(np.float64).copy()
    for tid, b in s["logit_bias"]:
        z[tid] += b
    if s.get("allowed") is not None:
        allowed = np.zeros(len(z), dtype=bool)
        allowed[s["allowed"]] = True
        z[~allowed] = -np.inf
    rp = s["repetition_penalty"]
    if rp != 1.0:
        for t in sorted(set(hist)):
            z[t] = z[t] / rp if z[t] > 0 else z[t] * rp
    gen = hist[prompt_len:]
    counts = np.bincount(np.asarray(gen, dtype=np.int64), minlength=len(z)) if gen else np.zeros(len(z))
    seen = counts > 0
    z = z - s["presence_penalty"] * seen - s["frequency_penalty"] * counts
    return z


def warp(z, s):
    n = len(z)
    if s["temperature"] <= 0:
        p = np.zeros(n)
        p[int(np.argmax(z))] = 1.0
        return p
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.exp((z - z.max()) / s["temperature"])
    p = e / e.sum()
    # rank: descending logit, lower id first among ties
    rank = sorted(range(n), key=lambda i: (-z[i], i))
    keep = np.isfinite(z)
    if s["top_k"] > 0:
        for r in rank[s["top_k"]:]:
            keep[r] = False
    mass = p[keep].sum()
    cum, reached = 0.0, False
    for i in rank:
        if not keep[i]:
            continue
        if reached:
            keep[i] = False
        cum += p[i] / mass
        if cum >= s["top_p"]:
            reached = True
    top = p[keep].max()
    keep &= ~(p < s["min_p"] * top)
    out = np.where(keep, p, 0.0)
    return out / out.sum()


def logprobs(z, s):
    t = s["temperature"] if s["temperature"] > 0 else 1.0
    y = z / t
    m = y[np.isfinite(y)].max()
    lse = m + np.log(np.exp(y - m).sum())
    return y - lse


def main():
    rng = np.random.default_rng(28)
    vocab = 24
    settings = [
        dict(temperature=1.0, presence_penalty=0.8),
        dict(temperature=1.0, frequency_penalty=0.5),
        dict(temperature=0.7, presence_penalty=-1.5, frequency_penalty=1.25),
        dict(temperature=1.0, logit_bias=[[2, 5.0], [7, -100.0], [19, 1.5]]),
        dict(temperature=0.9, repetition_penalty=1.3, presence_penalty=0.6, frequency_penalty=0.4,
             logit_bias=[[0, -2.0], [11, 3.0]], top_k=10, top_p=0.9, min_p=0.02),
        dict(temperature=1.2, frequency_penalty=2.0, allowed=[1, 3, 4, 8, 9, 15, 16, 22]),
        dict(temperature=0.0, presence_penalty=2.0, frequency_penalty=-0.5, logit_bias=[[5, 0.75]]),
        dict(temperature=0.0, repetition_penalty=1.5, frequency_penalty=1.0,
             allowed=[0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 23]),
    ]
    cases = []
    for k, s in enumerate(settings):
        full = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0,
                    presence_penalty=0.0, frequency_penalty=0.0, logit_bias=[], allowed=None)
        full.update(s)
        z = rng.normal(0.0, 2.0, vocab).astype(np.float32)
        prompt_len = int(rng.integers(2, 6))
        # Repeats on purpose, in the prompt and the generated part.
        hist = [int(t) for t in rng.integers(0, vocab // 2, prompt_len + 8)]
        p = process(z, hist, prompt_len, full)
        lp = logprobs(p, full)
        cases.append(dict(
            name=f"case{k}",
            logits=[float(v) for v in z],
            history=hist,
            prompt_len=prompt_len,
            settings=full,
            processed=[None if not np.isfinite(v) else float(v) for v in p],
            probs=[float(v) for v in warp(p, full)],
            logprobs=[None if not np.isfinite(v) else float(v) for v in lp],
        ))
    with open(OUT, "w") as f:
        json.dump({"generator": "scripts/reference/penalties_golden.py", "vocab": vocab,
                   "cases": cases}, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
