"""Text corpora as token ids: files matched by globs, encoded with a llama2.c
tokenizer.bin (each file starts with BOS), and cut into training windows.
Used by train_base.py (the base model's data) and by the head recipes when
a corpus is given instead of self-distillation."""
from __future__ import annotations

import glob
import os

import numpy as np
import torch

from .model import Llama2cTokenizer

BOS = 1


def corpus_files(patterns: list, max_bytes: int) -> list:
    """Files matching the globs (** recurses), sorted, until max_bytes."""
    files = sorted({f for p in patterns for f in glob.glob(os.path.expanduser(p), recursive=True)
                    if os.path.isfile(f)})
    out, total = [], 0
    for f in files:
        if total >= max_bytes:
            break
        out.append(f)
        total += os.path.getsize(f)
    return out


def tokenize(tok: Llama2cTokenizer, files: list) -> np.ndarray:
    """BOS + the file's tokens, for every file, concatenated."""
    ids = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        ids.append(BOS)
        for line in text.splitlines(keepends=True):
            ids.extend(tok.encode(line))
    return np.asarray(ids, dtype=np.int64)


def split_files(files: list, eval_files: int):
    """(train files, held-out files): the last `eval_files` are held out."""
    if len(files) <= eval_files:
        raise ValueError(f"{len(files)} corpus files: need more than the {eval_files} held out")
    return files[:-eval_files], files[-eval_files:]


def windows(data: np.ndarray, n: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """n random windows of length + 1 tokens [n, length + 1]."""
    starts = torch.randint(0, len(data) - length - 1, (n,), generator=gen).numpy()
    return torch.from_numpy(np.stack([data[s:s + length + 1] for s in starts]))


def corpus_sequences(data: np.ndarray, n: int, length: int, seed: int):
    """The head recipes' data from a corpus: n random windows of length + 1
    tokens, and the mask of positions whose next token is a target (all but
    the last), in make_data's (tokens, mask) form."""
    if len(data) < length + 2:
        raise ValueError(f"corpus has {len(data)} tokens: too few for windows of {length + 1}")
    tokens = windows(data, n, length, torch.Generator().manual_seed(seed))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[:, -1] = False
    return tokens, mask
