"""A compact PyTorch Llama-family model for training draft heads.

Same model formats and numerics as the C++ runtime (model/formats/,
model/runtime/): RMSNorm, rotary embeddings (Hugging Face rotate_half layout,
optional Llama 3 frequency scaling), grouped-query attention, SwiGLU MLP,
optional q/k/v biases (Qwen2) and q/k RMSNorm (Qwen3), tied or untied LM head.

Modules are named like transformers' LlamaForCausalLM (model.embed_tokens,
model.layers.{i}.self_attn.q_proj, ..., model.norm, lm_head), so a Hugging
Face state dict loads as is and a head's tensors are a rename away from the
specline.head.v1 names (docs/heads.md).

Loaders:
  load_llama2c(path)  Karpathy's legacy llama2.c checkpoint (.bin); q/k rows
                      are permuted from llama2.c's interleaved RoPE pairs to
                      rotate_half order, so one forward pass serves both.
  load_hf(dir)        config.json + model.safetensors (or a sharded index).
  load_model(path)    either, by what `path` is.

forward() returns logits and every hidden state in Hugging Face numbering:
hidden[0] = embedding output, hidden[k] = output of layer k-1 (before the
final norm); len(hidden) == n_layers + 1.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import struct
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclasses.dataclass
class LlamaConfig:
    arch: str = "llama"
    dim: int = 64
    hidden_dim: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 4
    head_dim: int = 16
    vocab_size: int = 256
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_seq_len: int = 2048
    tied_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    # Llama 3 RoPE scaling: {factor, low_freq_factor, high_freq_factor,
    # original_max_position_embeddings} or None.
    llama3_scaling: Optional[dict] = None

    def fingerprint(self) -> dict:
        """The `base` block of head.json (docs/heads.md): ModelConfig fields."""
        return dict(arch=self.arch, dim=self.dim, hidden_dim=self.hidden_dim,
                    n_layers=self.n_layers, n_heads=self.n_heads, n_kv_heads=self.n_kv_heads,
                    head_dim=self.head_dim, vocab_size=self.vocab_size,
                    norm_eps=float(self.norm_eps), rope_theta=float(self.rope_theta),
                    qkv_bias=self.qkv_bias, qk_norm=self.qk_norm)


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


def rope_inv_freq(cfg: LlamaConfig) -> torch.Tensor:
    hd = cfg.head_dim
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    s = cfg.llama3_scaling
    if s:  # transformers' _compute_llama3_parameters (== model/formats/rope_factors.cc)
        factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        orig = s["original_max_position_embeddings"]
        low_wl, high_wl = orig / low, orig / high
        wl = 2 * math.pi / inv
        scaled = torch.where(wl > low_wl, inv / factor, inv)
        smooth = (orig / wl - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wl < high_wl) & ~(wl > low_wl)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def causal_attention(q, k, v, mask):
    """softmax(q k^T / sqrt(d) + mask) v (mask: True = may attend), written out: the same as
    F.scaled_dot_product_attention, which Debian's torch 1.13 lacks."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rope(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)

    def forward(self, positions: torch.Tensor):
        """positions [T] -> cos, sin [T, head_dim]."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        q, kv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, q, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(cfg.dim, kv, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(cfg.dim, kv, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(q, cfg.dim, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps)

    def forward(self, x, cos, sin, cache=None):
        """x [B, T, H]; cache: None or a dict with 'k', 'v' [B, kvh, S, hd]
        of the S earlier positions (updated in place)."""
        c = self.cfg
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, c.n_heads, c.head_dim)
        k = self.k_proj(x).view(B, T, c.n_kv_heads, c.head_dim)
        v = self.v_proj(x).view(B, T, c.n_kv_heads, c.head_dim)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        past = 0
        if cache is not None:
            if "k" in cache:
                past = cache["k"].shape[2]
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        rep = c.n_heads // c.n_kv_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        S = k.shape[2]
        # query i (absolute past + i) sees keys 0..past + i
        mask = torch.arange(S, device=x.device)[None, :] <= (past + torch.arange(T, device=x.device))[:, None]
        y = causal_attention(q, k, v, mask)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.down_proj = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class _Body(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.model = _Body(cfg)
        self.rope = Rope(cfg)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tied_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.source_path: Optional[str] = None

    def new_cache(self):
        return [dict() for _ in range(self.cfg.n_layers)]

    def forward(self, tokens: torch.Tensor, start_pos: int = 0, cache=None, n_layers=None):
        """tokens [B, T] at positions start_pos..start_pos+T-1.

        Returns (logits [B, T, V], hidden list of n_layers + 1 tensors
        [B, T, H]). With `cache` (from new_cache()) earlier positions are
        attended to and the cache grows by T. With n_layers=k only the first
        k layers run and logits is None (hidden has k + 1 entries)."""
        cos, sin = self.rope(torch.arange(start_pos, start_pos + tokens.shape[1], device=tokens.device))
        h = self.model.embed_tokens(tokens)
        hidden = [h]
        k = self.cfg.n_layers if n_layers is None else n_layers
        for i, layer in enumerate(self.model.layers[:k]):
            h = layer(h, cos, sin, None if cache is None else cache[i])
            hidden.append(h)
        if n_layers is not None and n_layers < self.cfg.n_layers:
            return None, hidden
        return self.lm_head(self.model.norm(h)), hidden

    @torch.no_grad()
    def generate(self, prompt: list, steps: int, temperature: float = 0.0, top_p: float = 1.0,
                 generator: Optional[torch.Generator] = None, stop_ids=()) -> list:
        """Continues `prompt` (one sequence) for up to `steps` tokens."""
        out = sample_batch(self, torch.tensor([prompt]), steps, temperature, top_p, generator)[0]
        res = []
        for t in out.tolist():
            if t in stop_ids:
                break
            res.append(t)
        return res


def sample_next(logits: torch.Tensor, temperature: float, top_p: float,
                generator: Optional[torch.Generator]) -> torch.Tensor:
    """logits [B, V] -> tokens [B]: argmax at temperature 0, else nucleus sampling."""
    if temperature <= 0:
        return logits.argmax(-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sp, idx = probs.sort(dim=-1, descending=True)
        keep = sp.cumsum(-1) - sp < top_p  # the smallest prefix reaching top_p
        sp = sp * keep
        choice = torch.multinomial(sp / sp.sum(-1, keepdim=True), 1, generator=generator)
        return idx.gather(-1, choice)[:, 0]
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


@torch.no_grad()
def sample_batch(model: Llama, prompts: torch.Tensor, steps: int, temperature: float,
                 top_p: float, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """prompts [B, P] (same length) -> continuations [B, steps] (KV-cached)."""
    cache = model.new_cache()
    logits, _ = model(prompts, 0, cache)
    pos = prompts.shape[1]
    out = []
    for _ in range(steps):
        nxt = sample_next(logits[:, -1], temperature, top_p, generator)
        out.append(nxt)
        if len(out) == steps:
            break
        logits, _ = model(nxt[:, None], pos, cache)
        pos += 1
    return torch.stack(out, dim=1)


# ---------------------------------------------------------------- loaders

def _interleaved_to_half(w: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:
    """q/k rows from llama2.c's interleaved RoPE pairs (2i, 2i+1) to the
    rotate_half order (i, i + head_dim/2), per head (transformers'
    convert_llama_weights_to_hf permute)."""
    rows_in = w.shape[1:]
    return w.view(n_heads, head_dim // 2, 2, *rows_in).transpose(1, 2).reshape(n_heads * head_dim, *rows_in)


def load_llama2c(path: str) -> Llama:
    """Karpathy's legacy llama2.c checkpoint (see model/formats/llama2c.cc)."""
    with open(path, "rb") as f:
        dim, hidden, L, nh, nkv, vocab, seq_len = struct.unpack("<7i", f.read(28))
        if dim == 0x616B3432:
            raise ValueError(f"{path}: versioned llama2.c export (ak42) is not supported")
        data = np.frombuffer(f.read(), dtype="<f4")
    tied = vocab > 0
    vocab = abs(vocab)
    hd = dim // nh
    kv = nkv * hd
    cfg = LlamaConfig(arch="llama", dim=dim, hidden_dim=hidden, n_layers=L, n_heads=nh,
                      n_kv_heads=nkv, head_dim=hd, vocab_size=vocab, norm_eps=1e-5,
                      rope_theta=10000.0, max_seq_len=seq_len, tied_embeddings=tied)
    off = 0

    def take(*shape):
        nonlocal off
        n = int(np.prod(shape))
        if off + n > data.size:
            raise ValueError(f"{path}: file too short for its llama2.c header")
        t = torch.from_numpy(data[off:off + n].copy()).view(*shape)
        off += n
        return t

    sd = {"model.embed_tokens.weight": take(vocab, dim)}
    blocks = [("input_layernorm.weight", (dim,)), ("self_attn.q_proj.weight", (dim, dim)),
              ("self_attn.k_proj.weight", (kv, dim)), ("self_attn.v_proj.weight", (kv, dim)),
              ("self_attn.o_proj.weight", (dim, dim)), ("post_attention_layernorm.weight", (dim,)),
              ("mlp.gate_proj.weight", (hidden, dim)), ("mlp.down_proj.weight", (dim, hidden)),
              ("mlp.up_proj.weight", (hidden, dim))]
    for name, shape in blocks:
        for l in range(L):
            t = take(*shape)
            if name == "self_attn.q_proj.weight":
                t = _interleaved_to_half(t, nh, hd)
            elif name == "self_attn.k_proj.weight":
                t = _interleaved_to_half(t, nkv, hd)
            sd[f"model.layers.{l}.{name}"] = t
    sd["model.norm.weight"] = take(dim)
    take(seq_len * hd // 2)  # freq_cis_real (unused: RoPE is recomputed)
    take(seq_len * hd // 2)  # freq_cis_imag
    if not tied:
        sd["lm_head.weight"] = take(vocab, dim)
    if off != data.size:
        raise ValueError(f"{path}: size does not match its llama2.c header")
    return _build(cfg, sd, path)


def hf_config(cfg_json: dict, has_q_bias=False, has_q_norm=False) -> LlamaConfig:
    """ModelConfig from a Hugging Face config.json (same rules as
    model/formats/hf_model.cc)."""
    j = cfg_json
    t = j["model_type"]
    if t not in ("llama", "mistral", "qwen2", "qwen3"):
        raise ValueError(f"unsupported model_type {t!r}")
    nh = j["num_attention_heads"]
    rp = j.get("rope_parameters") if isinstance(j.get("rope_parameters"), dict) else None
    theta = (rp.get("rope_theta", j.get("rope_theta", 10000.0)) if rp else j.get("rope_theta", 10000.0))
    rs = rp if rp is not None else j.get("rope_scaling")
    scaling = None
    if rs:
        rtype = rs.get("rope_type", rs.get("type", ""))
        if rtype == "llama3":
            scaling = dict(factor=rs.get("factor", 8.0), low_freq_factor=rs.get("low_freq_factor", 1.0),
                           high_freq_factor=rs.get("high_freq_factor", 4.0),
                           original_max_position_embeddings=rs.get("original_max_position_embeddings", 8192))
        elif rtype not in ("", "default"):
            raise ValueError(f"unsupported rope scaling {rtype!r}")
    max_seq = j.get("max_position_embeddings", 2048)
    return LlamaConfig(
        arch=t, dim=j["hidden_size"], hidden_dim=j["intermediate_size"],
        n_layers=j["num_hidden_layers"], n_heads=nh,
        n_kv_heads=j.get("num_key_value_heads") or nh,
        head_dim=j.get("head_dim") or j["hidden_size"] // nh, vocab_size=j["vocab_size"],
        norm_eps=j.get("rms_norm_eps", 1e-6), rope_theta=theta, max_seq_len=max_seq,
        tied_embeddings=bool(j.get("tie_word_embeddings", False)),
        qkv_bias=t == "qwen2" or bool(j.get("attention_bias", False)) or has_q_bias,
        qk_norm=t == "qwen3" or has_q_norm, llama3_scaling=scaling)


def load_hf(path: str) -> Llama:
    from safetensors.torch import load_file
    with open(os.path.join(path, "config.json")) as f:
        j = json.load(f)
    index = os.path.join(path, "model.safetensors.index.json")
    sd = {}
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        for fn in files:
            sd.update(load_file(os.path.join(path, fn)))
    else:
        sd = load_file(os.path.join(path, "model.safetensors"))
    cfg = hf_config(j, "model.layers.0.self_attn.q_proj.bias" in sd,
                    "model.layers.0.self_attn.q_norm.weight" in sd)
    sd = {k: v.float() for k, v in sd.items()}
    return _build(cfg, sd, path)


def _build(cfg: LlamaConfig, sd: dict, path: str) -> Llama:
    m = Llama(cfg)
    if cfg.tied_embeddings:
        sd = {k: v for k, v in sd.items() if k != "lm_head.weight"}
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    missing, unexpected = m.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ValueError(f"{path}: missing tensors {missing}, unexpected {unexpected}")
    m.source_path = path
    return m.eval()


_GGUF_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
               "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def load_gguf(path: str) -> Llama:
    """A llama-architecture GGUF (any type the `gguf` package dequantizes:
    F32/F16/BF16, Q8_0, Q4_0/Q4_1, K-quants), dequantized to fp32. Like
    llama.cpp's converter, GGUF stores q/k rows in interleaved RoPE order:
    they are permuted to rotate_half as for llama2.c."""
    try:
        import gguf
        from gguf.quants import dequantize
    except ImportError as e:
        raise ImportError("reading GGUF needs the `gguf` package (pip install gguf; "
                          "training/setup.sh installs it)") from e
    r = gguf.GGUFReader(path)

    def field(key, default=None):
        f = r.fields.get(key)
        if f is None:
            return default
        v = f.parts[f.data[0]]
        return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v.tolist()[0]

    arch = field("general.architecture")
    if arch != "llama":
        raise ValueError(f"{path}: architecture {arch!r}; the training code reads llama GGUFs")
    tensors = {t.name: t for t in r.tensors}
    dim = field("llama.embedding_length")
    nh = field("llama.attention.head_count")
    nkv = field("llama.attention.head_count_kv", nh)
    hd = field("llama.rope.dimension_count", dim // nh)
    vocab = tensors["token_embd.weight"].shape[1]
    cfg = LlamaConfig(arch="llama", dim=dim, hidden_dim=field("llama.feed_forward_length"),
                      n_layers=field("llama.block_count"), n_heads=nh, n_kv_heads=nkv, head_dim=hd,
                      vocab_size=int(vocab), norm_eps=field("llama.attention.layer_norm_rms_epsilon", 1e-5),
                      rope_theta=field("llama.rope.freq_base", 10000.0),
                      max_seq_len=field("llama.context_length", 2048),
                      tied_embeddings="output.weight" not in tensors)

    def get(name):
        t = tensors[name]
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(a.reshape(tuple(int(x) for x in reversed(t.shape)))))

    sd = {"model.embed_tokens.weight": get("token_embd.weight"), "model.norm.weight": get("output_norm.weight")}
    for l in range(cfg.n_layers):
        for short, name in _GGUF_NAMES.items():
            w = get(f"blk.{l}.{short}.weight")
            if short == "attn_q":
                w = _interleaved_to_half(w, nh, hd)
            elif short == "attn_k":
                w = _interleaved_to_half(w, nkv, hd)
            sd[f"model.layers.{l}.{name}.weight"] = w
    if not cfg.tied_embeddings:
        sd["lm_head.weight"] = get("output.weight")
    return _build(cfg, sd, path)


def load_model(path: str) -> Llama:
    if os.path.isdir(path):
        return load_hf(path)
    if path.endswith(".gguf"):
        return load_gguf(path)
    return load_llama2c(path)


def file_sha256(path: str) -> str:
    """sha256 of a model file, or of a directory's config.json + weight files."""
    h = hashlib.sha256()
    files = [path] if os.path.isfile(path) else [
        os.path.join(path, f) for f in sorted(os.listdir(path))
        if f == "config.json" or f.endswith(".safetensors")]
    for fn in files:
        with open(fn, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------- llama2.c tokenizer

class Llama2cTokenizer:
    """llama2.c's tokenizer.bin: run.c's decode, and its encode (byte-pair
    merges by score, byte fallback at id byte + 3) for training corpora."""

    def __init__(self, path: str, vocab_size: Optional[int] = None):
        self.pieces, self.scores = [], []
        with open(path, "rb") as f:
            struct.unpack("<i", f.read(4))  # max_token_length
            while vocab_size is None or len(self.pieces) < vocab_size:
                head = f.read(8)
                if len(head) < 8:
                    if vocab_size is None:
                        break
                    raise ValueError(f"{path}: fewer than {vocab_size} pieces")
                score, n = struct.unpack("<fi", head)
                self.scores.append(score)
                self.pieces.append(f.read(n))
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self._cache: dict = {}

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def encode(self, text: str) -> list:
        """Token ids of `text`: no BOS and no dummy-prefix space (callers
        encode a corpus piece by piece); equal pieces are encoded once."""
        got = self._cache.get(text)
        if got is not None:
            return got
        toks = []
        for ch in text:
            b = ch.encode("utf-8")
            i = self.ids.get(b)
            if i is not None:
                toks.append(i)
            else:
                toks.extend(x + 3 for x in b)
        while len(toks) > 1:
            best, best_i, best_id = -1e30, -1, -1
            for i in range(len(toks) - 1):
                j = self.ids.get(self.pieces[toks[i]] + self.pieces[toks[i + 1]])
                if j is not None and self.scores[j] > best:
                    best, best_i, best_id = self.scores[j], i, j
            if best_i < 0:
                break
            toks[best_i:best_i + 2] = [best_id]
        if len(self._cache) < 1_000_000:
            self._cache[text] = toks
        return toks

    def piece(self, prev: int, tok: int) -> bytes:
        """run.c's decode() + safe_printf()."""
        p = self.pieces[tok]
        if prev == 1 and p.startswith(b" "):
            p = p[1:]
        if len(p) == 6 and p.startswith(b"<0x") and p.endswith(b">"):
            p = bytes([int(p[3:5], 16)])
        if len(p) == 1 and not (chr(p[0]).isprintable() or chr(p[0]).isspace()) and p[0] < 128:
            return b""
        return p
