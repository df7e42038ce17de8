#!/usr/bin/env python3
"""Train an SPD speculation module by self-distillation and export it.

Recipe (SPD paper, section 4.1 "Training Method" and appendix A):
  data    continuations sampled from the base model itself
          (train_ppsd.prepare_run: temperature, top-p, seed recorded);
  module  n stages, L_s decoder layers, v11 (default taps SpdDefaultTaps)
          or v10 features (specline_train/spd.py); own LM head copied from
          the base, FCs = identity on the deepest tapped block, layers =
          copies of the base's last L_s layers (--init-layers random for
          fresh ones); base embedding and final norm frozen (shared);
  layout  simulated pipeline fill (appendix A.2), per training sequence:
          with probability --full-prob (0.5) the pipeline is fully occupied
          (drawn per sequence, or per batch with --fill-per batch)
          (a = n: rows t-n+1..t at depths n-1..0, earlier rows at n), else
          a ~ U{1..n-1} trailing rows in flight (depths a-1..0), earlier
          rows at n. Every position t of the sequence is a query at once:
          the g^0 block is the only query block (appendix A.3) and row t
          (depth 0) predicts x_{t+1};
  loss    KD: KL(teacher || module) at T = 1 over the continuation
          positions, the teacher being the full base model (the paper uses
          KD only, no CE term);
  optim   Adam, linear decay of the learning rate (the paper:
          linear decay).
Base hidden states and teacher distributions are computed per batch under
torch.no_grad (the base is frozen). Held-out sequences (another seed) give
the acceptance before/after, measured with the true steady-state in-flight
schedule (a = n) and in warm-up (a = 1):
  greedy  mean of [argmax module == argmax teacher] per position,
  T=1     mean of sum_v min(p_teacher(v), p_module(v)).

  python3 training/train_spd.py --model ../shared/models/stories260K/stories260K.bin \
      --n-stages 5 --spd-layers 1 --out training/heads/stories260K/spd-n5-l1
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from specline_train.heads import export_head  # noqa: E402
from specline_train.model import Llama, file_sha256  # noqa: E402
from specline_train.spd import SpdModule  # noqa: E402
from train_ppsd import (add_data_args, corpus_options, describe_data, machine,  # noqa: E402
                        parse_prompts, prepare_run, write_report)


@torch.no_grad()
def base_pass(model: Llama, tokens: torch.Tensor):
    """(hidden list H^0..H^L, teacher log-probs [B, S, V]) for a batch."""
    logits, hidden = model(tokens)
    return hidden, torch.log_softmax(logits.float(), -1)


def kd_loss(logits, teacher_logp, mask):
    """KL(teacher || module), mean over masked positions."""
    logq = torch.log_softmax(logits.float(), -1)
    kl = (teacher_logp.exp() * (teacher_logp - logq)).sum(-1)
    m = mask.float()
    return (kl * m).sum() / m.sum().clamp(min=1)


def sample_active(n: int, batch: int, full_prob: float, g: torch.Generator,
                  per: str = "sequence") -> torch.Tensor:
    """Appendix A.2: a = n with probability full_prob, else a ~ U{1..n-1};
    drawn per sequence ("for each training example"), or once for the whole
    batch with per="batch" (the issue's "half the batches fully occupied";
    the partial fill is still drawn per sequence)."""
    if per == "batch":
        full = (torch.rand(1, generator=g) < full_prob).expand(batch)
    else:
        full = torch.rand(batch, generator=g) < full_prob
    part = torch.randint(1, n, (batch,), generator=g) if n > 1 else torch.ones(batch, dtype=torch.long)
    return torch.where(full, torch.full_like(part, n), part)


@torch.no_grad()
def evaluate(module: SpdModule, model: Llama, tokens, mask, active: int, batch: int = 32):
    kl = agree = tv = n = 0.0
    for i in range(0, len(tokens), batch):
        tk, m = tokens[i:i + batch], mask[i:i + batch]
        hidden, tlp = base_pass(model, tk)
        lg = module.forward_fill(tk, hidden, active)
        w = m.float().sum().item()
        kl += kd_loss(lg, tlp, m).item() * w
        agree += ((lg.argmax(-1) == tlp.argmax(-1)) & m).float().sum().item()
        tv += (torch.minimum(torch.softmax(lg.float(), -1), tlp.exp()).sum(-1) * m).sum().item()
        n += w
    return {"kl": kl / n, "accept_greedy": agree / n, "accept_t1": tv / n, "positions": int(n)}


def evaluate_all(module, model, tokens, mask):
    return {"steady": evaluate(module, model, tokens, mask, module.n),
            "warmup_a1": evaluate(module, model, tokens, mask, 1)}


def train(model_path: str, n_stages: int, spd_layers: int = 1, out: str | None = None,
          layout: str = "v11", taps=None, steps: int = 1500, batch: int = 16, lr: float = 3e-3,
          full_prob: float = 0.5, n_train: int = 512, n_eval: int = 64, length: int = 128,
          temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, prompts=None,
          init_layers: str = "last", log_every: int = 50, dtype: str = "F32",
          threads: int | None = None, quiet: bool = False, device: str = "cpu",
          fill_per: str = "sequence", corpus: dict | None = None) -> dict:
    say, t0, model, (tok_tr, m_tr), (tok_ev, m_ev), data = prepare_run(
        model_path, prompts, n_train, n_eval, length, temperature, top_p, seed, threads, quiet, device,
        corpus)
    t_data = time.time() - t0
    say(f"data: {len(tok_tr)} train / {len(tok_ev)} held-out sequences of {length} tokens, "
        f"{describe_data(data)}, in {t_data:.1f}s")

    module = SpdModule.from_base(model, n_stages, spd_layers, layout, taps, init_layers).to(device)
    say(f"module: n={n_stages}, L_s={spd_layers}, layout {layout}, taps {module.taps}, "
        f"features by depth {[idx for _, idx in module.plans]}")
    before = evaluate_all(module.eval(), model, tok_ev, m_ev)
    say(f"before: steady KL {before['steady']['kl']:.4f}, acceptance greedy "
        f"{before['steady']['accept_greedy']:.4f}, T=1 {before['steady']['accept_t1']:.4f}")

    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / max(1, steps))
    g = torch.Generator().manual_seed(seed + 7)
    curve = []
    t1 = time.time()
    module.train()
    for step in range(1, steps + 1):
        idx = torch.randint(0, len(tok_tr), (batch,), generator=g).to(device)
        tk, m = tok_tr[idx], m_tr[idx]
        hidden, tlp = base_pass(model, tk)
        active = sample_active(n_stages, batch, full_prob, g, fill_per).to(device)
        loss = kd_loss(module.forward_fill(tk, hidden, active), tlp, m)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        curve.append(loss.item())
        if step % log_every == 0 or step == 1 or step == steps:
            say(f"step {step:5d}  KL {loss.item():.4f}")
    t_train = time.time() - t1
    module.eval()
    after = evaluate_all(module, model, tok_ev, m_ev)
    say(f"after:  steady KL {after['steady']['kl']:.4f}, acceptance greedy "
        f"{after['steady']['accept_greedy']:.4f}, T=1 {after['steady']['accept_t1']:.4f}; "
        f"warm-up (a=1) greedy {after['warmup_a1']['accept_greedy']:.4f}, "
        f"T=1 {after['warmup_a1']['accept_t1']:.4f}  ({steps} steps in {t_train:.1f}s)")

    result = {"module": module, "curve": curve, "before": before, "after": after,
              "train_seconds": t_train, "data_seconds": t_data}
    if out:
        meta = {
            "recipe": f"train_spd.py: SPD speculation module n={n_stages}, L_s={spd_layers}, "
                      f"{layout}, self-distillation, loss KL(teacher||module) at T=1, simulated "
                      f"pipeline fill (appendix A.2, P(full)={full_prob} per {fill_per}), "
                      f"g^0 block as queries",
            "base_model": os.path.basename(os.path.normpath(model_path)),
            "base_sha256": file_sha256(model_path),
            "init": "lm_head from base; fc = identity on the deepest tapped block; " +
                    (f"layers = copies of base layers {model.cfg.n_layers - spd_layers}.."
                     f"{model.cfg.n_layers - 1}" if init_layers == "last" else "layers random"),
            "data": data,
            "optimizer": {"name": "Adam", "lr": lr, "schedule": "linear decay to 0",
                          "batch_sequences": batch},
            "steps": steps,
            "train_seconds": round(t_train, 2),
            "machine": machine(device),
            "eval": "held-out, steady = full pipeline (a = n), warmup_a1 = a = 1",
            "eval_before": before, "eval_after": after,
        }
        export_head(out, "spd", None, model.cfg, module.state_dict(), meta, spd=module.spd_spec(),
                    dtype=dtype)
        say(f"wrote {out}")
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="llama2.c .bin or Hugging Face directory")
    ap.add_argument("--n-stages", type=int, required=True, help="n: 2 <= n <= n_layers")
    ap.add_argument("--spd-layers", type=int, default=1, help="L_s (the paper: <= L/n)")
    ap.add_argument("--layout", choices=["v11", "v10"], default="v11")
    ap.add_argument("--taps", help="comma-separated tap indices (default: SpdDefaultTaps / v10 union)")
    ap.add_argument("--out", help="head directory to write (specline.head.v1)")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--full-prob", type=float, default=0.5,
                    help="probability of a fully occupied pipeline (appendix A.2)")
    ap.add_argument("--fill-per", choices=["sequence", "batch"], default="sequence",
                    help="draw full / partial fill per training sequence (the appendix: "
                         "'for each training example') or per batch")
    add_data_args(ap)
    ap.add_argument("--init-layers", choices=["last", "random"], default="last")
    ap.add_argument("--log-every", type=int, default=50)
    a = ap.parse_args(argv)
    taps = [int(x) for x in a.taps.split(",")] if a.taps else None
    r = train(a.model, a.n_stages, a.spd_layers, a.out, a.layout, taps, a.steps, a.batch, a.lr,
              a.full_prob, a.train_sequences, a.eval_sequences, a.length, a.temperature, a.top_p,
              a.seed, parse_prompts(a.prompt_ids), a.init_layers, a.log_every, a.dtype, a.threads,
              device=a.device, fill_per=a.fill_per, corpus=corpus_options(a))
    write_report(a.json, r, "module")
    return 0


if __name__ == "__main__":
    sys.exit(main())
