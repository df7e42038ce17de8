#!/usr/bin/env python3
"""Trains a Llama-shaped base model from scratch on a text corpus and writes
it as a llama2.c checkpoint the C++ runtime serves (with the tokenizer
copied beside it as tokenizer.bin).

The draft-head recipes need a real model whose stages cost more than the
pipeline's own overhead; stories260K's do not. On a machine with no model
hub, this makes one from text the machine already holds, e.g. the Python
standard library's sources:

  PY=$(bash training/setup.sh | tail -1)
  $PY training/train_base.py --corpus '/usr/lib/python3.11/**/*.py' \\
      --tokenizer ../shared/models/stories260K/tok512.bin \\
      --dim 192 --layers 8 --steps 3000 --out ~/.cache/specline/code-base/model.bin

- tokens: llama2.c tokenizer.bin (its byte fallback encodes any text); each
  file starts with BOS; files are taken in sorted order up to
  --max-corpus-bytes and split by file into train / held-out (--eval-files);
- model: RMSNorm, RoPE, SwiGLU, GQA, tied embeddings (model.py's Llama);
- training: next-token cross-entropy on random windows of --seq-len, AdamW
  (weight decay 0.1 on matrices), linear warm-up then cosine decay to 10%;
- export: llama2.c v0 layout with q/k rows back in interleaved RoPE order;
  the file is re-read with load_llama2c and must give the same logits;
- metadata (model.json beside the file): corpus, tokens, steps, losses,
  time and machine.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from specline_train.corpus import corpus_files, split_files, tokenize, windows  # noqa: E402
from specline_train.model import Llama, LlamaConfig, Llama2cTokenizer, file_sha256, load_llama2c  # noqa: E402
from train_ppsd import machine  # noqa: E402


def half_to_interleaved(w: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """Inverse of model._interleaved_to_half: rotate_half rows (i, i + d/2)
    back to llama2.c's interleaved pairs (2i, 2i+1), per head."""
    rows_in = w.shape[1:]
    return w.reshape(n_heads, 2, head_dim // 2, *rows_in).transpose(1, 2).reshape(n_heads * head_dim, *rows_in)


def export_llama2c(model: Llama, path: str):
    """llama2.c's legacy (v0) checkpoint: 7 int32 header, then fp32 weights
    grouped by kind over all layers (model/formats/llama2c.cc)."""
    c = model.cfg
    assert c.tied_embeddings, "export writes a shared classifier (positive vocab size)"
    sd = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    L = c.n_layers
    parts = [sd["model.embed_tokens.weight"]]
    for name in ["input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                 "self_attn.v_proj.weight", "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                 "mlp.gate_proj.weight", "mlp.down_proj.weight", "mlp.up_proj.weight"]:
        for l in range(L):
            w = sd[f"model.layers.{l}.{name}"]
            if name == "self_attn.q_proj.weight":
                w = half_to_interleaved(w, c.n_heads, c.head_dim)
            elif name == "self_attn.k_proj.weight":
                w = half_to_interleaved(w, c.n_kv_heads, c.head_dim)
            parts.append(w)
    parts.append(sd["model.norm.weight"])
    # freq_cis_real / imag: run.c's precomputed RoPE table (readers recompute it).
    inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2).float() / c.head_dim))
    ang = torch.outer(torch.arange(c.max_seq_len).float(), inv)
    parts += [torch.cos(ang), torch.sin(ang)]
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<7i", c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                            c.vocab_size, c.max_seq_len))
        for p in parts:
            f.write(p.contiguous().numpy().astype("<f4").tobytes())
    os.replace(tmp, path)


@torch.no_grad()
def eval_loss(model: Llama, data: np.ndarray, length: int, batches: int, batch: int, device) -> float:
    gen = torch.Generator().manual_seed(1234)
    tot = 0.0
    for _ in range(batches):
        w = windows(data, batch, length, gen).to(device)
        logits, _ = model(w[:, :-1])
        tot += F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), w[:, 1:].reshape(-1)).item()
    return tot / batches


def train(a) -> dict:
    torch.manual_seed(a.seed)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    tok = Llama2cTokenizer(a.tokenizer)
    files = corpus_files(a.corpus, a.max_corpus_bytes)
    try:
        train_files, eval_files = split_files(files, a.eval_files)
    except ValueError as e:
        raise SystemExit(f"corpus {a.corpus}: {e}")
    t0 = time.time()
    train_ids = tokenize(tok, train_files)
    eval_ids = tokenize(tok, eval_files)
    t_tok = time.time() - t0
    print(f"corpus: {len(files)} files, {sum(os.path.getsize(f) for f in files) / 1e6:.1f} MB, "
          f"{len(train_ids)} train / {len(eval_ids)} held-out tokens (tokenized in {t_tok:.0f} s)",
          flush=True)
    heads = a.heads or max(1, a.dim // 32)
    cfg = LlamaConfig(arch="llama", dim=a.dim, hidden_dim=a.hidden or int(8 * a.dim / 3 + 31) // 32 * 32,
                      n_layers=a.layers, n_heads=heads, n_kv_heads=a.kv_heads or heads,
                      head_dim=a.dim // heads, vocab_size=tok.vocab_size, norm_eps=1e-5,
                      rope_theta=10000.0, max_seq_len=a.max_seq_len, tied_embeddings=True)
    model = Llama(cfg).to(device)
    for n, p in model.named_parameters():  # GPT-2 style init
        if p.dim() == 2:
            torch.nn.init.normal_(p, 0.0, 0.02 / (math.sqrt(2 * cfg.n_layers) if n.endswith(("o_proj.weight", "down_proj.weight")) else 1.0))
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    warm = max(1, a.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / a.steps)))))
    gen = torch.Generator().manual_seed(a.seed)
    print(f"model: dim {cfg.dim}, {cfg.n_layers} layers, {cfg.n_heads} heads ({cfg.n_kv_heads} kv), "
          f"hidden {cfg.hidden_dim}, vocab {cfg.vocab_size}: {params / 1e6:.2f} M parameters; "
          f"{a.steps} steps x {a.batch} x {a.seq_len} tokens on {device}", flush=True)
    eval_before = eval_loss(model, eval_ids, a.seq_len, a.eval_batches, a.batch, device)
    losses = []
    t1 = time.time()
    for step in range(1, a.steps + 1):
        w = windows(train_ids, a.batch, a.seq_len, gen).to(device)
        logits, _ = model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % a.log_every == 0 or step == a.steps:
            el = time.time() - t1
            print(f"step {step}/{a.steps}: loss {sum(losses[-a.log_every:]) / len(losses[-a.log_every:]):.3f}, "
                  f"{step * a.batch * a.seq_len / el:.0f} tok/s, {el:.0f} s", flush=True)
    train_s = time.time() - t1
    model.eval()
    eval_after = eval_loss(model, eval_ids, a.seq_len, a.eval_batches, a.batch, device)
    print(f"held-out loss {eval_before:.3f} -> {eval_after:.3f} nats/token", flush=True)
    meta = {"corpus": a.corpus, "files": len(files), "eval_files": a.eval_files,
            "train_tokens": int(len(train_ids)), "eval_tokens": int(len(eval_ids)),
            "tokenizer": os.path.abspath(a.tokenizer), "tokenizer_sha256": file_sha256(a.tokenizer),
            "config": dataclass_dict(cfg), "parameters": params, "steps": a.steps, "batch": a.batch,
            "seq_len": a.seq_len, "lr": a.lr, "seed": a.seed, "losses_first_last": [losses[0], losses[-1]],
            "eval_loss_before": eval_before, "eval_loss_after": eval_after,
            "train_seconds": train_s, "tokenize_seconds": t_tok, "machine": machine(str(device)),
            "torch": torch.__version__, "device": str(device)}
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        export_llama2c(model.cpu(), a.out)
        shutil.copyfile(a.tokenizer, os.path.join(os.path.dirname(os.path.abspath(a.out)), "tokenizer.bin"))
        # The file must be the model just trained.
        back = load_llama2c(a.out)
        probe = torch.from_numpy(eval_ids[:64][None])
        with torch.no_grad():
            want, _ = model(probe)
            got, _ = back(probe)
        err = (want - got).abs().max().item()
        if err > 1e-4 * max(1.0, want.abs().max().item()):
            raise SystemExit(f"exported file differs from the trained model: max |d logit| {err}")
        meta["sha256"] = file_sha256(a.out)
        with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
            json.dump(meta, f, indent=1)
        print(f"wrote {a.out} ({os.path.getsize(a.out) / 1e6:.1f} MB) and its tokenizer.bin", flush=True)
    return {"model": model, "meta": meta, "losses": losses}


def dataclass_dict(cfg: LlamaConfig) -> dict:
    return {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", required=True, help="glob (** recurses); repeatable")
    ap.add_argument("--max-corpus-bytes", type=int, default=4_000_000)
    ap.add_argument("--eval-files", type=int, default=8, help="last files (sorted) held out")
    ap.add_argument("--tokenizer", required=True, help="llama2.c tokenizer.bin")
    ap.add_argument("--dim", type=int, default=192)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=0, help="default dim / 32")
    ap.add_argument("--kv-heads", type=int, default=0, help="default = heads")
    ap.add_argument("--hidden", type=int, default=0, help="default 8 dim / 3, rounded up to 32")
    ap.add_argument("--max-seq-len", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=256, help="training window")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", help="llama2.c .bin to write (tokenizer.bin and <name>.json go beside it)")
    return ap


def main(argv=None):
    train(parser().parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
