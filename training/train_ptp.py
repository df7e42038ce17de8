#!/usr/bin/env python3
"""Train a PTP (Parallel Token Prediction, one-hot O-PTP) adapter by
distillation from the base model and export it (docs/ptp.md).

Recipe (PTP paper, section 2.2.1, Algorithm 2, appendix D and H.2; the
authors' code as REFERENCES.md summarises it):
  data    teacher completions pregenerated from the base (train_ppsd's
          prepare_run: from BOS, sampled at --temperature (1.0) and
          --top-p, seeded; held-out with another seed), trained on for
          several epochs (the paper: "sample training data from the teacher
          once and train multiple epochs on it");
  u       per token t_k of a completion: u_k uniform INSIDE the teacher's
          CDF bin [F_{k,t_k - 1}, F_{k,t_k}) (vocabulary order; the teacher
          distribution warped with the data's temperature / top-k / top-p;
          appendix D with b = 1), redrawn every step;
  layout  --groups-per-seq split points s per sequence (uniform over the
          continuation); each split gives N = --n-aux auxiliary rows for
          token indices s..s+N-1 that see the prefix rows < s (base K/V,
          computed once per batch under no_grad) and their own group
          causally (specline_train.ptp.PtpModel.aux_logits_train);
  model   base frozen; trainable: u_embed [3, H] and gated LoRA (rank
          --lora-rank, alpha --lora-alpha, default 2 r) on q/k/v/o/gate/up/
          down of every layer, active only at auxiliary rows;
  loss    O-PTP cross-entropy (Eq. 10) on the auxiliary rows: -log
          P(t_k | t_<s, u_s..u_k);
  optim   AdamW (the paper's choice for the LLM experiments), constant lr
          after a short warm-up, then linear decay to 0 over the last 20%.

Evaluation before and after (held-out):
  offline   teacher-forced at T=1 on held-out completions, u inside the
            bins: mean accepted tokens per call min(#correct + 1, N)
            (paper Eq. 16-17) for N = 1..n_aux, and the CE loss;
  decoding  ptp_generate (the lossless decoder, layout "last") on held-out
            prompts (their first --eval-prompt-len tokens), at T=0 and T=1:
            tokens per call = generated tokens / PTP calls.

  python3 training/train_ptp.py --model ../shared/models/stories260K/stories260K.bin \
      --out training/heads/stories260K/ptp --steps 2000 --threads 1
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from specline_train.model import file_sha256  # noqa: E402
from specline_train.ptp import PtpModel, export_ptp, ptp_generate  # noqa: E402
from train_ppsd import add_data_args, describe_data, machine, parse_prompts, prepare_run, write_report  # noqa: E402


def warp_batch(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """ptp.warp for a batch [..., V] (float64): same rule, vectorised."""
    lg = logits.double()
    if temperature <= 0:
        return torch.nn.functional.one_hot(lg.argmax(-1), lg.shape[-1]).double()
    p = torch.softmax(lg / temperature, -1)
    V = p.shape[-1]
    if (top_k and 0 < top_k < V) or top_p < 1.0:
        sp, idx = torch.sort(p, dim=-1, descending=True, stable=True)
        keep = torch.ones_like(sp, dtype=torch.bool)
        if top_k and 0 < top_k < V:
            keep[..., top_k:] = False
            sp = sp * keep
            sp = sp / sp.sum(-1, keepdim=True)
        if top_p < 1.0:
            keep &= (torch.cumsum(sp, -1) - sp) < top_p
        kept = torch.zeros_like(p).scatter(-1, idx, keep.double())
        p = p * kept
        p = p / p.sum(-1, keepdim=True)
    return p


def bin_u(probs: torch.Tensor, tokens: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """probs [B, S, V]: row k-1 is the teacher's distribution of token k;
    tokens [B, S]. Returns u [B, S] (u[:, 0] unused = 0): u_k uniform in
    [F_{k, t_k - 1}, F_{k, t_k}), vocabulary order (float64)."""
    B, S, V = probs.shape
    cdf = torch.cumsum(probs[:, :-1], -1)
    tk = tokens[:, 1:, None]
    hi = cdf.gather(-1, tk)[..., 0]
    w = probs[:, :-1].gather(-1, tk)[..., 0]
    r = torch.rand(B, S - 1, generator=g, dtype=torch.float64)
    u = (hi - w) + r * w
    return torch.cat([torch.zeros(B, 1, dtype=torch.float64), u], 1)


def draw_splits(mask: torch.Tensor, G: int, N: int, g: torch.Generator) -> torch.Tensor:
    """Split points s per sequence: token indices s..s+N-1 all sampled
    continuation tokens (mask[k-1] true for a sampled token k)."""
    B, S = mask.shape
    tgt = torch.zeros_like(mask)
    tgt[:, 1:] = mask[:, :-1]  # token k is a target
    out = torch.zeros(B, G, dtype=torch.long)
    for b in range(B):
        ks = torch.nonzero(tgt[b])[:, 0]
        lo, hi = int(ks.min()), int(ks.max()) - N + 1  # need s+N-1 <= last target
        out[b] = torch.randint(lo, max(lo, hi) + 1, (G,), generator=g)
    return out


def batch_loss(model: PtpModel, tokens, mask, N, G, g, temperature, top_k, top_p, want_correct=False):
    kvs, logits = model.base_prefix(tokens)
    probs = warp_batch(logits, temperature, top_k, top_p)
    u = bin_u(probs, tokens, g)
    splits = draw_splits(mask, G, N, g)
    idx = splits[:, :, None] + torch.arange(N)  # [B, G, N] token indices
    flat = idx.view(tokens.shape[0], -1)
    tgt = tokens.gather(1, flat).view_as(idx)
    uu = u.gather(1, flat).view_as(idx).float()
    lg = model.aux_logits_train(kvs, splits, uu)
    loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]).float(), tgt.reshape(-1))
    if not want_correct:
        return loss
    ok = (lg.argmax(-1) == tgt)  # [B, G, N]
    correct = torch.cumprod(ok.long(), -1).sum(-1)  # longest matching prefix, per group
    return loss, correct


@torch.no_grad()
def evaluate(model: PtpModel, tokens, mask, N, temperature, top_k, top_p, seed, prompts, gen_tokens,
             groups=8, batch=16):
    """Offline (teacher-forced, T = the data's) and decoding (T=0 / T=1) acceptance."""
    g = torch.Generator().manual_seed(seed)
    tot, n, correct = 0.0, 0, []
    for i in range(0, len(tokens), batch):
        loss, c = batch_loss(model, tokens[i:i + batch], mask[i:i + batch], N, groups, g, temperature,
                             top_k, top_p, want_correct=True)
        tot += loss.item() * c.numel()
        n += c.numel()
        correct.append(c.flatten())
    c = torch.cat(correct).float()
    offline = {str(k): float(torch.clamp(torch.clamp(c, max=k) + 1, max=k).mean()) for k in range(1, N + 1)}
    res = {"ce": tot / n, "offline_accepted_per_call": offline, "offline_calls": int(n)}
    for T in (0.0, 1.0):
        st: dict = {}
        for j, p in enumerate(prompts):
            ptp_generate(model, p, gen_tokens, T, 0, 1.0, seed=seed + j, stats=st)
        res[f"decode_T{T:g}"] = {"tokens_per_call": st["tokens"] / st["calls"], "calls": st["calls"],
                                 "tokens": st["tokens"]}
    return res


def describe(ev):
    return (f"CE {ev['ce']:.4f}, offline accepted/call (N=max) "
            f"{list(ev['offline_accepted_per_call'].values())[-1]:.3f}, decoding tokens/call "
            f"T=0 {ev['decode_T0']['tokens_per_call']:.3f}, T=1 {ev['decode_T1']['tokens_per_call']:.3f}")


def train(model_path: str, out: str | None = None, steps: int = 2000, n_aux: int = 8, lora_rank: int = 16,
          lora_alpha: float | None = None, batch: int = 16, groups: int = 8, lr: float = 2e-3,
          n_train: int = 512, n_eval: int = 64, length: int = 128, temperature: float = 1.0,
          top_k: int = 0, top_p: float = 1.0, seed: int = 0, prompts=None, eval_prompts: int = 16,
          eval_prompt_len: int = 8, eval_gen_tokens: int = 48, log_every: int = 50, dtype: str = "F32",
          threads: int | None = None, quiet: bool = False, device: str = "cpu", max_seconds: float = 0) -> dict:
    say, t0, base, (tok_tr, m_tr), (tok_ev, m_ev), data = prepare_run(
        model_path, prompts, n_train, n_eval, length, temperature, top_p, seed, threads, quiet, device, None)
    tok_tr, m_tr, tok_ev, m_ev = tok_tr.cpu(), m_tr.cpu(), tok_ev.cpu(), m_ev.cpu()
    data["top_k"] = top_k
    t_data = time.time() - t0
    say(f"data: {len(tok_tr)} train / {len(tok_ev)} held-out sequences of {length} tokens, "
        f"{describe_data(data)}, in {t_data:.1f}s")
    model = PtpModel(base.cpu(), n_aux, lora_rank, lora_alpha, seed=seed)
    ev_prompts = [tok_ev[i, :eval_prompt_len].tolist() for i in range(min(eval_prompts, len(tok_ev)))]
    ev_args = (n_aux, temperature, top_k, top_p, seed + 99, ev_prompts, eval_gen_tokens)
    before = evaluate(model.eval(), tok_ev, m_ev, *ev_args)
    say(f"before: {describe(before)}")

    opt = torch.optim.AdamW(model.trainable(), lr=lr, weight_decay=0.0)
    warm, decay_from = max(1, steps // 50), int(steps * 0.8)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (1.0 if s < decay_from else
                                                   max(0.0, (steps - s) / max(1, steps - decay_from))))
    g = torch.Generator().manual_seed(seed + 7)
    curve = []
    t1 = time.time()
    model.train()
    done = 0
    for step in range(1, steps + 1):
        idx = torch.randint(0, len(tok_tr), (batch,), generator=g)
        loss = batch_loss(model, tok_tr[idx], m_tr[idx], n_aux, groups, g, temperature, top_k, top_p)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        curve.append(loss.item())
        done = step
        if step % log_every == 0 or step == 1 or step == steps:
            say(f"step {step:5d}  CE {loss.item():.4f}  ({time.time() - t1:.0f}s)")
        if max_seconds and time.time() - t1 > max_seconds:
            say(f"stopping at step {step}: --max-seconds {max_seconds} reached")
            break
    t_train = time.time() - t1
    model.eval()
    after = evaluate(model, tok_ev, m_ev, *ev_args)
    say(f"after:  {describe(after)}  ({done} steps in {t_train:.1f}s)")
    result = {"model": model, "curve": curve, "before": before, "after": after, "steps": done,
              "train_seconds": t_train, "data_seconds": t_data}
    if out:
        meta = {
            "recipe": f"train_ptp.py: one-hot PTP (O-PTP), N={n_aux} auxiliary rows, gated LoRA r={lora_rank} "
                      f"on q/k/v/o/gate/up/down, u_embed piecewise_linear_3; distillation from pregenerated "
                      f"teacher completions, u uniform inside the teacher's CDF bin, CE on auxiliary rows",
            "base_model": os.path.basename(os.path.normpath(model_path)),
            "base_sha256": file_sha256(model_path),
            "init": "lora_A kaiming-uniform, lora_B = 0 (adapter = base at init); u_embed N(0, std(embedding))",
            "data": data,
            "sampling": {"temperature": temperature, "top_k": top_k, "top_p": top_p},
            "optimizer": {"name": "AdamW", "lr": lr, "weight_decay": 0.0,
                          "schedule": f"warm-up {warm} steps, constant, linear decay to 0 from step {decay_from}",
                          "batch_sequences": batch, "groups_per_sequence": groups},
            "steps": done,
            "train_seconds": round(t_train, 2),
            "machine": machine(device),
            "eval": "offline: teacher-forced held-out, min(#correct+1, N); decode: ptp_generate layout last, "
                    f"{len(ev_prompts)} held-out prompts of {eval_prompt_len} tokens, {eval_gen_tokens} tokens",
            "eval_before": before, "eval_after": after,
        }
        export_ptp(model, out, meta, dtype)
        say(f"wrote {out}")
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="llama2.c .bin or Hugging Face directory")
    ap.add_argument("--out", help="head directory to write (specline.head.v1, method ptp)")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--max-seconds", type=float, default=0, help="stop training after this long (0: no limit)")
    ap.add_argument("--n-aux", type=int, default=8, help="N auxiliary rows per call")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--lora-alpha", type=float, default=None, help="default 2 * rank")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--groups-per-seq", type=int, default=8, help="split points per sequence per step")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--top-k", type=int, default=0, help="teacher warp top-k for the u bins (0: off)")
    ap.add_argument("--eval-prompts", type=int, default=16)
    ap.add_argument("--eval-prompt-len", type=int, default=8)
    ap.add_argument("--eval-gen-tokens", type=int, default=48)
    add_data_args(ap)
    ap.add_argument("--log-every", type=int, default=50)
    a = ap.parse_args(argv)
    if a.corpus:
        raise SystemExit("train_ptp.py distils from teacher completions only (no --corpus)")
    if a.device != "cpu":
        print("note: the PTP reference runs on the CPU; --device is ignored", flush=True)
    r = train(a.model, a.out, a.steps, a.n_aux, a.lora_rank, a.lora_alpha, a.batch, a.groups_per_seq, a.lr,
              a.train_sequences, a.eval_sequences, a.length, a.temperature, a.top_k, a.top_p, a.seed,
              parse_prompts(a.prompt_ids), a.eval_prompts, a.eval_prompt_len, a.eval_gen_tokens,
              a.log_every, a.dtype, a.threads, device="cpu", max_seconds=a.max_seconds)
    write_report(a.json, r, "model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
