#!/usr/bin/env python3
"""Train a PPSD early-exit draft head by self-distillation and export it.

Recipe (PPSD, REFERENCES.md; loss of the paper's appendix):
  data    continuations sampled from the base model itself (temperature,
          top-p and seed recorded in the head's metadata), from BOS or from
          given prompts (token ids);
  head    ppsd-norm (RMSNorm + LM head) or ppsd-layer (one decoder layer +
          RMSNorm + LM head) on h_E, the hidden state after the first E
          layers; norm / LM head copied from the base (and, for the layer
          head, the layer from base layer E unless --init-layer random);
  loss    lambda * KL(teacher || head) + CE(head, the teacher's sampled next
          token), the teacher being the full base model at T = 1, over the
          continuation positions;
  optim   Adam.
Held-out sequences (another seed) give the acceptance before and after:
  greedy  mean of [argmax head == argmax teacher] per position,
  T=1     mean of sum_v min(p_teacher(v), p_head(v)) (the expected acceptance
          of one drafted token under speculative sampling).

  python3 training/train_ppsd.py --model ../shared/models/stories260K/stories260K.bin \
      --method ppsd-norm --exit-layer 1 --out heads/stories260K/ppsd-norm-e1
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from specline_train.corpus import corpus_files, corpus_sequences, split_files, tokenize  # noqa: E402
from specline_train.heads import export_module, make_head  # noqa: E402
from specline_train.model import Llama, Llama2cTokenizer, file_sha256, load_model, sample_batch  # noqa: E402


def make_data(model: Llama, prompts: list, per_prompt: int, length: int, temperature: float,
              top_p: float, seed: int, batch: int = 64):
    """Samples `per_prompt` continuations of `length` tokens for each prompt.
    Returns tokens [N, S] (right-padded with 0) and a bool mask [N, S] of the
    positions t whose next token x[t+1] is a sampled one (the training targets)."""
    dev = next(model.parameters()).device
    g = torch.Generator(device=dev).manual_seed(seed)
    seqs = []
    for p in prompts:
        left = per_prompt
        while left > 0:
            b = min(batch, left)
            cont = sample_batch(model, torch.tensor([p] * b, device=dev), length, temperature, top_p, g)
            for row in cont.cpu():
                seqs.append((len(p), torch.cat([torch.tensor(p), row])))
            left -= b
    S = max(len(s) for _, s in seqs)
    tokens = torch.zeros(len(seqs), S, dtype=torch.long)
    mask = torch.zeros(len(seqs), S, dtype=torch.bool)
    for i, (plen, s) in enumerate(seqs):
        tokens[i, :len(s)] = s
        mask[i, plen - 1:len(s) - 1] = True
    return tokens, mask


class Teacher:
    """h_E and the teacher's log-probabilities (T = 1) of the rows of a token
    set: computed once when they fit in `budget` bytes, else recomputed per
    batch (a 49 K vocabulary makes them gigabytes)."""

    def __init__(self, model: Llama, tokens: torch.Tensor, exit_layer: int, budget: int = 1 << 30):
        self.model, self.tokens, self.exit_layer = model, tokens, exit_layer
        n, s = tokens.shape
        self.cached = n * s * (model.cfg.vocab_size + model.cfg.dim) * 4 <= budget
        if self.cached:
            hs, lps = zip(*(self._compute(slice(i, i + 64)) for i in range(0, n, 64)))
            self.h, self.lp = torch.cat(hs), torch.cat(lps)

    def __len__(self):
        return len(self.tokens)

    @torch.no_grad()
    def _compute(self, idx):
        logits, hidden = self.model(self.tokens[idx])
        return hidden[self.exit_layer], torch.log_softmax(logits.float(), -1)

    def get(self, idx):
        """(h_E [B, S, H], log-probs [B, S, V]) of rows idx (a slice or indices)."""
        return (self.h[idx], self.lp[idx]) if self.cached else self._compute(idx)


def loss_fn(head_logits, teacher_logp, next_tokens, mask, lam):
    """lambda * KL(teacher || head) + CE(head, sampled next token), averaged
    over masked positions. Returns (loss, kl, ce)."""
    logq = torch.log_softmax(head_logits.float(), -1)
    kl = (teacher_logp.exp() * (teacher_logp - logq)).sum(-1)
    ce = -logq.gather(-1, next_tokens[..., None])[..., 0]
    m = mask.float()
    n = m.sum().clamp(min=1)
    kl, ce = (kl * m).sum() / n, (ce * m).sum() / n
    return lam * kl + ce, kl, ce


@torch.no_grad()
def evaluate(head, teacher: Teacher, tokens, mask, lam, batch=64):
    """Held-out loss and acceptance (greedy and T=1) of `head`."""
    agree = tv = loss = 0.0
    n = 0.0
    for i in range(0, len(teacher), batch):
        h, tl = teacher.get(slice(i, i + batch))
        hl = head(h)
        m = mask[i:i + batch]
        nxt = torch.roll(tokens[i:i + batch], -1, dims=1)
        l, _, _ = loss_fn(hl, tl, nxt, m, lam)
        w = m.float().sum().item()
        loss += l.item() * w
        agree += ((hl.argmax(-1) == tl.argmax(-1)) & m).float().sum().item()
        overlap = torch.minimum(torch.softmax(hl.float(), -1), tl.exp()).sum(-1)
        tv += (overlap * m).sum().item()
        n += w
    return {"loss": loss / n, "accept_greedy": agree / n, "accept_t1": tv / n, "positions": int(n)}


def add_data_args(ap):
    """The options every recipe shares: self-distillation data, export dtype,
    threads, JSON report."""
    ap.add_argument("--train-sequences", type=int, default=512)
    ap.add_argument("--eval-sequences", type=int, default=64)
    ap.add_argument("--length", type=int, default=128, help="sampled tokens per sequence")
    ap.add_argument("--temperature", type=float, default=1.0, help="data sampling temperature")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt-ids", help="file: one prompt per line, space-separated token ids "
                                         "(default: BOS = 1)")
    ap.add_argument("--corpus", action="append",
                    help="train on random windows of this text (glob, ** recurses; repeatable) "
                         "instead of self-distilled samples; needs --tokenizer")
    ap.add_argument("--tokenizer", help="llama2.c tokenizer.bin for --corpus")
    ap.add_argument("--max-corpus-bytes", type=int, default=4_000_000)
    ap.add_argument("--eval-files", type=int, default=8, help="last corpus files (sorted) held out")
    ap.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F32")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="torch device for the base model, the data and the head")
    ap.add_argument("--json", help="also write the losses and evaluation here")


def corpus_options(a) -> dict | None:
    """The --corpus options as prepare_run's `corpus`, or None."""
    if not a.corpus:
        return None
    if not a.tokenizer:
        raise SystemExit("--corpus needs --tokenizer (a llama2.c tokenizer.bin)")
    return {"patterns": a.corpus, "tokenizer": a.tokenizer, "max_bytes": a.max_corpus_bytes,
            "eval_files": a.eval_files}


def describe_data(data: dict) -> str:
    if data["kind"] == "corpus":
        return f"windows of the corpus {data['corpus']} ({data['files']} files, seed {data['seed']})"
    return (f"sampled from the base (T={data['temperature']}, top_p={data['top_p']}, "
            f"seed {data['seed']})")


def prepare_run(model_path, prompts, n_train, n_eval, length, temperature, top_p, seed,
                threads=None, quiet=False, device="cpu", corpus=None):
    """What every recipe starts with: a logger, the frozen base model, and
    train / held-out sequences on `device`: self-distilled (held-out with
    another seed), or with `corpus` ({patterns, tokenizer, max_bytes,
    eval_files}) random windows of the corpus (held-out from its last files).
    Returns (say, t0, model, (tokens, mask) train, (tokens, mask) held-out,
    data description for the head's metadata)."""
    if threads:
        torch.set_num_threads(threads)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    torch.manual_seed(seed)
    t0 = time.time()
    model = load_model(model_path).to(device)
    for p in model.parameters():
        p.requires_grad_(False)
    if corpus:
        tok = Llama2cTokenizer(corpus["tokenizer"])
        if tok.vocab_size != model.cfg.vocab_size:
            raise SystemExit(f"{corpus['tokenizer']}: {tok.vocab_size} tokens, the model has "
                             f"{model.cfg.vocab_size}")
        train_files, eval_files = split_files(corpus_files(corpus["patterns"], corpus["max_bytes"]),
                                              corpus["eval_files"])
        train_set = corpus_sequences(tokenize(tok, train_files), n_train, length, seed)
        eval_set = corpus_sequences(tokenize(tok, eval_files), n_eval, length, seed + 1_000_003)
        data = {"kind": "corpus", "corpus": corpus["patterns"], "files": len(train_files),
                "eval_files": len(eval_files), "tokenizer_sha256": file_sha256(corpus["tokenizer"]),
                "targets": "the corpus's next token (CE); the base model's distribution (KL)"}
    else:
        prompts = prompts or [[1]]
        per_train = max(1, n_train // len(prompts))
        per_eval = max(1, n_eval // len(prompts))
        train_set = make_data(model, prompts, per_train, length, temperature, top_p, seed)
        eval_set = make_data(model, prompts, per_eval, length, temperature, top_p, seed + 1_000_003)
        data = {"kind": "self-distillation", "prompts": "BOS" if prompts == [[1]] else prompts,
                "temperature": temperature, "top_p": top_p}
    data.update({"train_sequences": len(train_set[0]), "eval_sequences": len(eval_set[0]),
                 "tokens_per_sequence": length, "seed": seed, "eval_seed": seed + 1_000_003})
    to = lambda ds: tuple(t.to(device) for t in ds)  # noqa: E731
    return say, t0, model, to(train_set), to(eval_set), data


def train(model_path: str, method: str, exit_layer: int, out: str | None = None, steps: int = 300,
          batch: int = 16, lr: float = 3e-3, lam: float = 1.0, n_train: int = 512, n_eval: int = 64,
          length: int = 128, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0,
          prompts: list | None = None, init_layer: str = "copy", log_every: int = 25,
          dtype: str = "F32", threads: int | None = None, quiet: bool = False,
          device: str = "cpu", corpus: dict | None = None) -> dict:
    say, t0, model, (tok_tr, m_tr), (tok_ev, m_ev), data = prepare_run(
        model_path, prompts, n_train, n_eval, length, temperature, top_p, seed, threads, quiet, device,
        corpus)
    teacher_tr = Teacher(model, tok_tr, exit_layer)
    teacher_ev = Teacher(model, tok_ev, exit_layer)
    t_data = time.time() - t0
    say(f"data: {len(tok_tr)} train / {len(tok_ev)} held-out sequences of {length} tokens, "
        f"{describe_data(data)}, in {t_data:.1f}s")

    head = make_head(method, model, exit_layer,
                     **({"init_layer": init_layer} if method == "ppsd-layer" else {})).to(device)
    before = evaluate(head.eval(), teacher_ev, tok_ev, m_ev, lam)
    say(f"before: held-out loss {before['loss']:.4f}, acceptance greedy {before['accept_greedy']:.4f}, "
        f"T=1 {before['accept_t1']:.4f}")

    opt = torch.optim.Adam(head.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed + 7)
    curve = []
    t1 = time.time()
    head.train()
    for step in range(1, steps + 1):
        idx = torch.randint(0, len(tok_tr), (batch,), generator=g).to(device)
        h, lp = teacher_tr.get(idx)
        loss, kl, ce = loss_fn(head(h), lp, torch.roll(tok_tr[idx], -1, dims=1), m_tr[idx], lam)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        curve.append(loss.item())
        if step % log_every == 0 or step == 1 or step == steps:
            say(f"step {step:5d}  loss {loss.item():.4f}  (kl {kl.item():.4f}, ce {ce.item():.4f})")
    t_train = time.time() - t1
    head.eval()
    after = evaluate(head, teacher_ev, tok_ev, m_ev, lam)
    say(f"after:  held-out loss {after['loss']:.4f}, acceptance greedy {after['accept_greedy']:.4f}, "
        f"T=1 {after['accept_t1']:.4f}  ({steps} steps in {t_train:.1f}s)")

    result = {"head": head, "curve": curve, "before": before, "after": after,
              "train_seconds": t_train, "data_seconds": t_data}
    if out:
        meta = {
            "recipe": f"train_ppsd.py: {method} at E={exit_layer}, self-distillation, "
                      f"loss lambda*KL(teacher||head)+CE(teacher sample), lambda={lam}",
            "base_model": os.path.basename(os.path.normpath(model_path)),
            "base_sha256": file_sha256(model_path),
            "init": "norm, lm_head from base" + (f"; layer from base layer {exit_layer}"
                                                  if method == "ppsd-layer" and init_layer == "copy" else
                                                  ("; layer random" if method == "ppsd-layer" else "")),
            "data": data,
            "optimizer": {"name": "Adam", "lr": lr, "batch_sequences": batch},
            "steps": steps,
            "train_seconds": round(t_train, 2),
            "machine": machine(device),
            "eval_before": before, "eval_after": after,
        }
        export_module(out, head, meta, dtype=dtype)
        say(f"wrote {out}")
    return result


def machine(device: str = "cpu") -> str:
    """The CPU, and the GPU when `device` is one (what the training ran on)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    dev = torch.cuda.get_device_name(torch.device(device)) if str(device).startswith("cuda") else "CPU only"
    return f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, {dev}, torch {torch.__version__}"


def write_report(path: str | None, result: dict, model_key: str):
    """--json: the run's losses and evaluation (result without the model)."""
    if path:
        with open(path, "w") as f:
            json.dump({k: v for k, v in result.items() if k != model_key}, f, indent=1)


def parse_prompts(path: str | None):
    if not path:
        return None
    with open(path) as f:
        return [[int(x) for x in line.split()] for line in f if line.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="llama2.c .bin or Hugging Face directory")
    ap.add_argument("--method", choices=["ppsd-norm", "ppsd-layer"], default="ppsd-norm")
    ap.add_argument("--exit-layer", type=int, required=True, help="E: 1 <= E < n_layers")
    ap.add_argument("--out", help="head directory to write (specline.head.v1)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16, help="sequences per step")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--lambda", dest="lam", type=float, default=1.0, help="weight of the KL term")
    add_data_args(ap)
    ap.add_argument("--init-layer", choices=["copy", "random"], default="copy")
    ap.add_argument("--log-every", type=int, default=25)
    a = ap.parse_args(argv)
    r = train(a.model, a.method, a.exit_layer, a.out, a.steps, a.batch, a.lr, a.lam,
              a.train_sequences, a.eval_sequences, a.length, a.temperature, a.top_p, a.seed,
              parse_prompts(a.prompt_ids), a.init_layer, a.log_every, a.dtype, a.threads,
              device=a.device, corpus=corpus_options(a))
    write_report(a.json, r, "head")
    return 0


if __name__ == "__main__":
    sys.exit(main())
