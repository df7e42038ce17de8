#!/usr/bin/env python3
"""Train a PIPO (pair-in, pair-out) model and export it (docs/pipo.md).

PIPO is NOT lossless (no verifier): opt-in. Recipe (PIPO paper, sections
3.3-3.4 and appendix C; REFERENCES.md):
  model   compressor (exact a+b init), MTP head (fc [I, I], layer = copy of
          the base's last layer, base LM head shared), confidence head; the
          backbone's projection matrices are fine-tuned too (the authors:
          LoRA on q,k,v,o,gate,up,down; here full fine-tuning of those
          matrices; embedding, norms and LM head frozen), so the backbone is
          exported next to the head (backbone.bin);
  data    self-distilled continuations of the base (train_ppsd.prepare_run:
          BOS, T=1, seed) or --corpus windows; each training sequence gets a
          random prompt length P ~ U{1..--max-prompt} (the prompt padded to
          even length with PAD), the rest is the response;
  stage 1 SFT (--stage sft): CE(token1) + CE(token2) + lambda_conf *
          BCE(confidence, p_draft(x).detach()); random PAD injection as the
          authors: per step rho ~ U(0, --pad-max) (0.25), each response pair
          (a, b) is split with probability rho into (a, PAD), (b, PAD);
          labels at PAD positions are masked (--pad-sampling fixed uses
          rho = --pad-max for every step);
  stage 2 on-policy distillation (--stage distill): the student rolls out
          --rollout-steps pairs at T=1 with its own decoder (tau drawn per
          batch from --rollout-tau LO,HI), the base (uncompressed) is the
          teacher on the PAD-free text, mapped back to pair positions (PAD
          compaction); loss = reverse KL(p_s || p_t) at both heads (exact
          over the vocabulary; the authors' default is the sampled-token
          Monte-Carlo estimate) + lambda_conf * BCE(confidence,
          min(1, p_t(y) / p_s(y)).detach()), y the draft token drawn in the
          rollout (also for rejected drafts);
  optim   AdamW, 5% linear warm-up then cosine decay (the paper), per stage.
Evaluation (held-out, before and after): teacher-forced CE of both heads,
agreement with the base (greedy: argmax == base argmax; T=1: sum min(p, q))
per head, confidence BCE; and decoding from 16 held-out prompts: accepted
second tokens per step and tokens per backbone step at tau = 0.95.

  python3 training/train_pipo.py --model ../shared/models/stories260K/stories260K.bin \
      --stage both --steps 3000 --distill-steps 600 --train-sequences 8192 --threads 1 \
      --out training/heads/stories260K/pipo          # the committed model (training/PIPO.md)
(--train-sequences defaults to 8192 here: with the other recipes' 512 the
full backbone fine-tuning overfits.)
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from specline_train.model import Llama, file_sha256  # noqa: E402
from specline_train.pipo import (PAD_ID_STORIES, TAU_DEFAULT, PipoModel, export_pipo, pad_prompt,  # noqa: E402
                                 pipo_generate, pipo_rollout, teacher_logprobs)
from train_ppsd import (add_data_args, corpus_options, describe_data, machine,  # noqa: E402
                        parse_prompts, prepare_run, write_report)


def real_rows(tokens: torch.Tensor, mask: torch.Tensor, pad_id: int) -> list:
    """Each data row as a list of its real tokens (right padding removed;
    cut before any token equal to the PAD id, which the base can sample)."""
    rows = []
    for t, m in zip(tokens.tolist(), mask.tolist()):
        n = max(i for i, x in enumerate(m) if x) + 2 if any(m) else len(t)
        r = t[:n]
        if pad_id in r:
            r = r[:r.index(pad_id)]
        rows.append(r)
    return rows


def build_stream(row: list, prompt_len: int, rho: float, n_pairs: int, pad_id: int,
                 g: torch.Generator):
    """Pair stream of 2*(n_pairs+1) tokens: prompt row[:prompt_len] padded to
    even length, then the response pairs, each split into (a, PAD), (b, PAD)
    with probability rho. Returns (stream, first_response_pair) or None when
    the row is too short."""
    s = pad_prompt(row[:prompt_len], pad_id)
    first = len(s) // 2
    resp = row[prompt_len:]
    L = 2 * (n_pairs + 1)
    for k in range(0, len(resp) - 1, 2):
        if len(s) >= L:
            break
        a, b = resp[k], resp[k + 1]
        if rho > 0 and torch.rand(1, generator=g).item() < rho:
            s += [a, pad_id, b, pad_id]
        else:
            s += [a, b]
    if len(s) < L:
        return None
    return s[:L], first


def make_batch(rows, idx, max_prompt, rho, n_pairs, pad_id, g, device):
    streams = []
    for i in idx:
        for _ in range(4):
            P = int(torch.randint(1, max_prompt + 1, (1,), generator=g))
            got = build_stream(rows[i], P, rho, n_pairs, pad_id, g)
            if got:
                streams.append(got[0])
                break
    return torch.tensor(streams, device=device)


def sft_loss(model: PipoModel, stream: torch.Tensor, lam_conf: float):
    f = model.forward_pairs(stream)
    V = f["logits1"].shape[-1]
    ce1 = F.cross_entropy(f["logits1"].reshape(-1, V).float(), f["targets1"].reshape(-1))
    m2 = (f["targets2"] != model.pad_id).float()
    ce2_all = F.cross_entropy(f["logits2"].reshape(-1, V).float(), f["targets2"].reshape(-1),
                              reduction="none").view_as(m2)
    n2 = m2.sum().clamp(min=1)
    ce2 = (ce2_all * m2).sum() / n2
    target = torch.exp(-ce2_all).detach()     # p_draft(x), the student's own probability of the gold token
    bce = (F.binary_cross_entropy_with_logits(f["conf_logit"], target, reduction="none") * m2).sum() / n2
    return ce1 + ce2 + lam_conf * bce, {"ce1": ce1.item(), "ce2": ce2.item(), "bce": bce.item()}


def rev_kl(logits, teacher_lp):
    lq = torch.log_softmax(logits.float(), -1)
    return (lq.exp() * (lq - teacher_lp)).sum(-1)


def opd_loss(model: PipoModel, base: Llama, ro: dict, n_prompt_pairs: int, lam_conf: float):
    stream = ro["stream"]
    lp1, lp2 = teacher_logprobs(base, stream, model.pad_id)
    f = model.forward_pairs(stream)
    a = n_prompt_pairs - 1                    # pair positions that produced the rollout: a .. N-1
    kl1 = rev_kl(f["logits1"][:, a:], lp1[:, a:]).mean()
    kl2 = rev_kl(f["logits2"][:, a:], lp2[:, a:]).mean()
    K = stream.shape[1] // 2 - 1 - a
    y = ro["drafts"][:, :K]
    ls = torch.log_softmax(f["logits2"][:, a:].float(), -1).gather(-1, y[..., None])[..., 0]
    lt = lp2[:, a:].gather(-1, y[..., None])[..., 0]
    target = torch.exp(-(ls - lt).clamp(min=0)).detach()    # min(1, p_t / p_s)
    bce = F.binary_cross_entropy_with_logits(f["conf_logit"][:, a:], target)
    return kl1 + kl2 + lam_conf * bce, {"kl1": kl1.item(), "kl2": kl2.item(), "bce": bce.item(),
                                         "accept": ro["accepted"].float().mean().item()}


@torch.no_grad()
def evaluate(model: PipoModel, base: Llama, rows: list, max_prompt: int, n_pairs: int, rho: float,
             seed: int, device, n_prompts: int = 16, gen_tokens: int = 48) -> dict:
    """Teacher-forced metrics on the held-out rows (fixed streams: seeded
    prompt lengths and PAD splits at rate rho) and decoding statistics."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    stream = make_batch(rows, range(len(rows)), max_prompt, rho, n_pairs, model.pad_id, g, device)
    tot = {k: 0.0 for k in ("ce1", "ce2", "bce", "agree1", "agree2", "tv1", "tv2")}
    n1 = n2 = 0.0
    for i in range(0, len(stream), 32):
        s = stream[i:i + 32]
        f = model.forward_pairs(s)
        lp1, lp2 = teacher_logprobs(base, s, model.pad_id)
        V = f["logits1"].shape[-1]
        m2 = (f["targets2"] != model.pad_id).float()
        ce1 = F.cross_entropy(f["logits1"].reshape(-1, V), f["targets1"].reshape(-1), reduction="none")
        ce2 = F.cross_entropy(f["logits2"].reshape(-1, V), f["targets2"].reshape(-1),
                              reduction="none").view_as(m2)
        bce = F.binary_cross_entropy_with_logits(f["conf_logit"], torch.exp(-ce2), reduction="none")
        p1, p2 = torch.softmax(f["logits1"], -1), torch.softmax(f["logits2"], -1)
        tot["ce1"] += ce1.sum().item()
        tot["ce2"] += (ce2 * m2).sum().item()
        tot["bce"] += (bce * m2).sum().item()
        tot["agree1"] += (f["logits1"].argmax(-1) == lp1.argmax(-1)).float().sum().item()
        tot["agree2"] += ((f["logits2"].argmax(-1) == lp2.argmax(-1)).float() * m2).sum().item()
        tot["tv1"] += torch.minimum(p1, lp1.exp()).sum(-1).sum().item()
        tot["tv2"] += (torch.minimum(p2, lp2.exp()).sum(-1) * m2).sum().item()
        n1 += ce1.numel()
        n2 += m2.sum().item()
    out = {k: v / (n1 if k in ("ce1", "agree1", "tv1") else n2) for k, v in tot.items()}
    # decoding: held-out prompts of BOS + 3 tokens, tau = 0.95, greedy and T=1
    for temp in (0.0, 1.0):
        steps = acc = toks = 0
        for i in range(min(n_prompts, len(rows))):
            r = pipo_generate(model, rows[i][:4], gen_tokens, TAU_DEFAULT, temp, seed + i, return_info=True)
            steps += len(r["steps"])
            acc += sum(s["accepted"] for s in r["steps"])
            toks += len(r["tokens"])
        key = "greedy" if temp == 0 else "t1"
        out[f"accept_{key}"] = acc / steps
        out[f"tokens_per_step_{key}"] = toks / steps
    return out


def fmt(e: dict) -> str:
    return (f"CE1 {e['ce1']:.3f} CE2 {e['ce2']:.3f} BCE {e['bce']:.3f}; vs base greedy "
            f"{e['agree1']:.3f}/{e['agree2']:.3f}, T=1 {e['tv1']:.3f}/{e['tv2']:.3f}; tau=0.95 accept "
            f"greedy {e['accept_greedy']:.3f} T=1 {e['accept_t1']:.3f}, tokens/step "
            f"{e['tokens_per_step_greedy']:.2f}/{e['tokens_per_step_t1']:.2f}")


def lr_at(step: int, steps: int, lr: float, warmup: float = 0.05) -> float:
    w = max(1, int(warmup * steps))
    if step <= w:
        return lr * step / w
    return lr * 0.5 * (1 + math.cos(math.pi * (step - w) / max(1, steps - w)))


def train(model_path: str, out: str | None = None, stage: str = "both", steps: int = 2000,
          distill_steps: int | None = None, batch: int = 16, lr: float = 3e-3, distill_lr: float = 1e-3,
          n_pairs: int = 48, max_prompt: int = 8, pad_max: float = 0.25, pad_sampling: str = "uniform",
          lam_conf: float = 1.0, rollout_steps: int = 24, rollout_tau=(0.5, 1.0), pad_id: int = PAD_ID_STORIES,
          n_train: int = 512, n_eval: int = 64, length: int = 128, temperature: float = 1.0,
          top_p: float = 1.0, seed: int = 0, prompts=None, log_every: int = 50, dtype: str = "F32",
          threads: int | None = None, quiet: bool = False, device: str = "cpu", corpus: dict | None = None,
          init: str | None = None, eval_prompts: int = 16) -> dict:
    say, t0, base, (tok_tr, m_tr), (tok_ev, m_ev), data = prepare_run(
        model_path, prompts, n_train, n_eval, length, temperature, top_p, seed, threads, quiet, device,
        corpus)
    rows_tr, rows_ev = real_rows(tok_tr, m_tr, pad_id), real_rows(tok_ev, m_ev, pad_id)
    t_data = time.time() - t0
    say(f"data: {len(rows_tr)} train / {len(rows_ev)} held-out sequences of {length} tokens, "
        f"{describe_data(data)}, in {t_data:.1f}s")
    if init:
        from specline_train.pipo import load_pipo
        model = load_pipo(init, base).train()
        say(f"model: loaded {init}")
    else:
        model = PipoModel.from_base(base, pad_id, TAU_DEFAULT, seed).to(device)
    ev_rho = pad_max / 2
    before = evaluate(model, base, rows_ev, max_prompt, n_pairs, ev_rho, seed + 99, device, eval_prompts)
    say(f"before: {fmt(before)}")
    g = torch.Generator().manual_seed(seed + 7)
    curves, times, mids = {}, {}, {}
    distill_steps = steps if distill_steps is None else distill_steps

    def run(name, nsteps, base_lr, step_fn):
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=base_lr, weight_decay=0.0)
        curve = []
        t1 = time.time()
        model.train()
        for step in range(1, nsteps + 1):
            for pg in opt.param_groups:
                pg["lr"] = lr_at(step, nsteps, base_lr)
            loss, parts = step_fn()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            curve.append(loss.item())
            if step % log_every == 0 or step == 1 or step == nsteps:
                say(f"{name} step {step:5d}  loss {loss.item():.4f}  " +
                    " ".join(f"{k} {v:.4f}" for k, v in parts.items()))
        model.eval()
        curves[name], times[name] = curve, time.time() - t1

    if stage in ("sft", "both"):
        def sft_step():
            rho = pad_max if pad_sampling == "fixed" else float(torch.rand(1, generator=g)) * pad_max
            idx = torch.randint(0, len(rows_tr), (batch,), generator=g).tolist()
            return sft_loss(model, make_batch(rows_tr, idx, max_prompt, rho, n_pairs, pad_id, g, device),
                            lam_conf)
        run("sft", steps, lr, sft_step)
        mids["sft"] = evaluate(model, base, rows_ev, max_prompt, n_pairs, ev_rho, seed + 99, device, eval_prompts)
        say(f"after SFT: {fmt(mids['sft'])}  ({steps} steps in {times['sft']:.1f}s)")

    if stage in ("distill", "both"):
        def opd_step():
            P = int(torch.randint(1, max_prompt + 1, (1,), generator=g))
            idx = torch.randint(0, len(rows_tr), (batch,), generator=g).tolist()
            padded = torch.tensor([pad_prompt(rows_tr[i][:P], pad_id) for i in idx], device=device)
            tau = rollout_tau[0] + torch.rand(1, generator=g).item() * (rollout_tau[1] - rollout_tau[0])
            model.eval()
            ro = pipo_rollout(model, padded, rollout_steps, tau, 1.0, g)
            model.train()
            return opd_loss(model, base, ro, padded.shape[1] // 2, lam_conf)
        run("distill", distill_steps, distill_lr, opd_step)

    after = evaluate(model, base, rows_ev, max_prompt, n_pairs, ev_rho, seed + 99, device, eval_prompts)
    say(f"after:  {fmt(after)}  ({', '.join(f'{k} {v:.1f}s' for k, v in times.items())})")
    result = {"model": model, "curves": curves, "before": before, "after": after, "mid": mids,
              "train_seconds": times, "data_seconds": t_data}
    if out:
        meta = {
            "recipe": f"train_pipo.py: PIPO stage {stage}: SFT CE(token1)+CE(token2)+{lam_conf}*BCE(conf, "
                      f"p_draft(x)), random PAD splits rho~U(0,{pad_max}) ({pad_sampling}); OPD reverse "
                      f"KL(p_s||p_t) both heads (exact over the vocabulary) + {lam_conf}*BCE(conf, "
                      f"min(1,p_t/p_s)), rollouts of {rollout_steps} pairs at T=1, tau~U{list(rollout_tau)}",
            "base_model": os.path.basename(os.path.normpath(model_path)),
            "base_sha256": file_sha256(model_path),
            "init": "compressor exact a+b; mtp.fc [I, I]; mtp layer = copy of base layer "
                    f"{base.cfg.n_layers - 1}; mtp.norm = base norm; confidence fc2 = 0",
            "trained": "compressor, mtp, confidence, backbone q/k/v/o/gate/up/down matrices",
            "data": data,
            "optimizer": {"name": "AdamW", "lr_sft": lr, "lr_distill": distill_lr,
                          "schedule": "5% linear warm-up, cosine to 0", "batch_sequences": batch,
                          "pairs_per_sequence": n_pairs, "max_prompt": max_prompt, "grad_clip": 1.0},
            "steps": {"sft": steps if stage in ("sft", "both") else 0,
                      "distill": distill_steps if stage in ("distill", "both") else 0},
            "train_seconds": {k: round(v, 1) for k, v in times.items()},
            "machine": machine(device),
            "eval": f"held-out, teacher-forced with PAD splits at rho={ev_rho}; decoding 16 prompts x 48 tokens",
            "eval_before": before, "eval_mid": mids, "eval_after": after,
        }
        export_pipo(out, model, meta, dtype=dtype, base_path=model_path)
        say(f"wrote {out}")
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="llama2.c .bin or Hugging Face directory")
    ap.add_argument("--out", help="head directory to write (specline.head.v1, method pipo)")
    ap.add_argument("--stage", choices=["sft", "distill", "both"], default="both")
    ap.add_argument("--init", help="start from this pipo export (e.g. --stage distill after an SFT run)")
    ap.add_argument("--steps", type=int, default=3000, help="SFT steps")
    ap.add_argument("--distill-steps", type=int, default=600, help="OPD steps")
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--lr", type=float, default=3e-3, help="SFT peak learning rate")
    ap.add_argument("--distill-lr", type=float, default=1e-3)
    ap.add_argument("--pairs", type=int, default=48, help="input pairs per training sequence")
    ap.add_argument("--max-prompt", type=int, default=8, help="prompt length ~ U{1..this}")
    ap.add_argument("--pad-max", type=float, default=0.25, help="PAD split rate rho_max")
    ap.add_argument("--pad-sampling", choices=["uniform", "fixed"], default="uniform",
                    help="rho ~ U(0, pad-max) per step (the authors) or rho = pad-max")
    ap.add_argument("--lambda-conf", type=float, default=1.0)
    ap.add_argument("--rollout-steps", type=int, default=24)
    ap.add_argument("--rollout-tau", default="0.5,1.0", help="LO,HI: rollout tau ~ U(LO, HI) per batch")
    ap.add_argument("--pad-id", type=int, default=PAD_ID_STORIES)
    ap.add_argument("--log-every", type=int, default=50)
    add_data_args(ap)
    ap.set_defaults(train_sequences=8192)
    a = ap.parse_args(argv)
    lo, hi = (float(x) for x in a.rollout_tau.split(","))
    r = train(a.model, a.out, a.stage, a.steps, a.distill_steps, a.batch, a.lr, a.distill_lr, a.pairs,
              a.max_prompt, a.pad_max, a.pad_sampling, a.lambda_conf, a.rollout_steps, (lo, hi), a.pad_id,
              a.train_sequences, a.eval_sequences, a.length, a.temperature, a.top_p, a.seed,
              parse_prompts(a.prompt_ids), a.log_every, a.dtype, a.threads, device=a.device,
              corpus=corpus_options(a), init=a.init)
    write_report(a.json, r, "model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
