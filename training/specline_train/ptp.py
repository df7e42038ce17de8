"""PTP (Parallel Token Prediction, Draxler et al.): the one-hot PTP draft
model, its coupled-sampling verifier, reference decoders and the
specline.head.v1 "ptp" export (docs/ptp.md).

Model (O-PTP, the variant the paper distils for speculative decoding):
  the frozen base model plus
  - u_embed: an auxiliary variable u in [0, 1) enters the model at an
    "auxiliary position" as u_embed(u), an interpolation between 3 learned
    vectors e0, e1, e2 (u_embed.weight [3, H]). REFERENCES.md says only
    "an interpolation between 3 learned vectors"; our formula
    ("piecewise_linear_3") is the linear interpolation through knots
    u = 0, 0.5, 1:
        u_embed(u) = w0(u) e0 + w1(u) e1 + w2(u) e2,
        w0 = max(0, 1 - 2u), w1 = 1 - |2u - 1|, w2 = max(0, 2u - 1)
    (u < 0.5: (1-2u) e0 + 2u e1; u >= 0.5: (2-2u) e1 + (2u-1) e2),
    computed in float32 from float32(u). It replaces the token embedding
    of that position (Llama has no absolute position embedding; RoPE
    gives the position).
  - gated LoRA (rank r, scale = lora_alpha / r) on every linear
    projection of every decoder layer (q, k, v, o, gate, up, down); the
    LoRA term is added ONLY at auxiliary positions:
        y = W x + b + gate(row) * scale * B (A x),  gate = 1 at auxiliary
    rows, 0 at token rows.
    Token rows therefore run the base model exactly (the teacher), and the
    final norm and LM head are the base's (shared, not in the file).

One PTP call (forward_call / _call): the committed prefix, then the verify
tokens (the last committed token followed by the previous call's pending
proposals; base weights), then N auxiliary rows (LoRA on). The auxiliary
row for token index k sits at RoPE position k, takes u_embed(u_k) and its
logits' argmax is the proposal for token k itself (not k+1). A verify row
at position p gives the teacher's logits for token p+1.

Coupled sampling (Algorithm 1 of the paper): the teacher token at index k
is inverse_cdf(warp(teacher logits), u_k) with the SAME u_k the proposal
used; accept the longest prefix of equal tokens plus one teacher token.
Every emitted token is a teacher token drawn by inverse CDF at u_k, so the
output equals plain_generate (plain decoding by inverse CDF at u_k) token
for token: lossless by construction, whatever the adapter's weights.

u_k is indexed by the generated-token index t = k - len(prompt) and drawn
from a counter-based generator: u(seed, t) = SplitMix64 output number t+1
of a generator seeded with `seed`, top 53 bits / 2^53 (u_value()).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .heads import (_fingerprint, check_base_fingerprint, load_head_tensors, read_head_json,
                    write_head_dir)
from .model import Llama, LlamaConfig, rope_inv_freq, rotate_half

METHOD = "ptp"
U_EMBED = "piecewise_linear_3"
ATTN_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_TARGETS = ("gate_proj", "up_proj", "down_proj")
LORA_TARGETS = tuple(f"self_attn.{t}" for t in ATTN_TARGETS) + tuple(f"mlp.{t}" for t in MLP_TARGETS)


# ------------------------------------------------------------- u values

_M64 = (1 << 64) - 1


def splitmix64(state: int) -> int:
    """SplitMix64's output for a generator whose state was `state` before the
    call (state is advanced by the golden gamma first)."""
    z = (state + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def u_value(seed: int, t: int) -> float:
    """u for generated-token index t (0 = the first token after the prompt):
    the (t+1)-th output of SplitMix64 seeded with `seed`, i.e. the state
    seed + t * 0x9E3779B97F4A7C15 (mod 2^64) mixed once; top 53 bits / 2^53,
    so u in [0, 1) exactly representable as a double."""
    state = (seed + t * 0x9E3779B97F4A7C15) & _M64
    return (splitmix64(state) >> 11) * (1.0 / (1 << 53))


def u_values(seed: int, start: int, count: int) -> list:
    return [u_value(seed, t) for t in range(start, start + count)]


# ---------------------------------------------------- coupled sampling

def warp(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Sampling distribution over the vocabulary (float64, vocabulary order).

    temperature <= 0: one-hot at the argmax (lowest index on ties): the greedy
    limit. Else p = softmax(logits / T) (float64); top_k > 0 keeps the k most
    probable tokens (descending probability, lower index first on ties);
    top_p < 1 then keeps the smallest such prefix whose mass reaches top_p
    (a token is kept while the mass before it is < top_p, as sample_next);
    the kept probabilities are renormalised and returned in vocabulary
    order (zero elsewhere)."""
    lg = logits.detach().double().flatten()
    V = lg.numel()
    if temperature <= 0:
        out = torch.zeros(V, dtype=torch.float64)
        out[int(torch.argmax(lg))] = 1.0  # torch.argmax returns the first maximal index
        return out
    p = torch.softmax(lg / temperature, dim=-1)
    if (top_k and 0 < top_k < V) or top_p < 1.0:
        # stable descending sort: ties keep the lower vocabulary index first
        order = sorted(range(V), key=lambda i: -float(p[i]))
        order = torch.tensor(order, dtype=torch.long)
        sp = p[order]
        keep = torch.ones(V, dtype=torch.bool)
        if top_k and 0 < top_k < V:
            keep[top_k:] = False
            sp = sp * keep
            sp = sp / sp.sum()
        if top_p < 1.0:
            before = torch.cumsum(sp, 0) - sp
            keep &= before < top_p
        out = torch.zeros(V, dtype=torch.float64)
        out[order[keep]] = p[order[keep]]
        return out / out.sum()
    return p


def inverse_cdf(probs: torch.Tensor, u: float) -> int:
    """Pick(u, P) (paper Eq. 2): the smallest index j with F_j > u, F the
    running sum of probs in vocabulary order (float64, summed sequentially).
    If rounding leaves F_{V-1} <= u, the last token with nonzero probability."""
    F_ = torch.cumsum(probs.double(), 0)
    hit = torch.nonzero(F_ > u)
    if hit.numel():
        return int(hit[0, 0])
    return int(torch.nonzero(probs > 0)[-1, 0])


def cdf_bin(probs: torch.Tensor, token: int):
    """[F_{t-1}, F_t): the u interval that picks `token`."""
    F_ = torch.cumsum(probs.double(), 0)
    hi = float(F_[token])
    return hi - float(probs[token]), hi


def verify(teacher_logits: torch.Tensor, proposals: list, u: list, temperature: float = 0.0,
           top_k: int = 0, top_p: float = 1.0):
    """Coupled-sampling verification. teacher_logits [m+1, V]: row j is the
    teacher's distribution of the token at the j-th checked index; proposals
    [m]; u [m+1]: the u of those indices. Returns (accepted a, tokens): the
    longest prefix with inverse_cdf(warp(row j), u_j) == proposals[j], then
    the teacher's token at row a; tokens = proposals[:a] + [teacher token],
    a + 1 tokens in all."""
    m = len(proposals)
    if teacher_logits.shape[0] < m + 1 or len(u) < m + 1:
        raise ValueError("verify needs m + 1 teacher rows and u values for m proposals")
    out = []
    for j in range(m + 1):
        tok = inverse_cdf(warp(teacher_logits[j], temperature, top_k, top_p), u[j])
        out.append(tok)
        if j == m or tok != proposals[j]:
            return j, out
    raise AssertionError("unreachable")


# ---------------------------------------------------------------- model

class GatedLoRA(nn.Module):
    """delta(x) = scale * (x A^T) B^T; A [r, in], B [out, r] (B = 0 at init)."""

    def __init__(self, d_in: int, d_out: int, rank: int, scale: float):
        super().__init__()
        self.lora_A = nn.Parameter(torch.empty(rank, d_in))
        self.lora_B = nn.Parameter(torch.zeros(d_out, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's / PEFT's init
        self.scale = scale

    def forward(self, x):
        return self.scale * F.linear(F.linear(x, self.lora_A), self.lora_B)


def piecewise_linear_3(u: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """u [...] (float32) -> [..., H]: linear interpolation through knots 0, 0.5, 1."""
    u = u.float()
    w0 = torch.clamp(1.0 - 2.0 * u, min=0.0)
    w1 = 1.0 - torch.abs(2.0 * u - 1.0)
    w2 = torch.clamp(2.0 * u - 1.0, min=0.0)
    return w0[..., None] * weight[0] + w1[..., None] * weight[1] + w2[..., None] * weight[2]


class PtpModel(nn.Module):
    """The base (frozen) + u_embed + gated LoRA. Trainable: u_embed.weight and
    every lora_A / lora_B. state_dict() of the adapter = adapter_tensors()."""

    def __init__(self, base: Llama, n_aux: int = 8, lora_rank: int = 16, lora_alpha: Optional[float] = None,
                 seed: int = 0):
        super().__init__()
        cfg = base.cfg
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.n_aux, self.lora_rank = n_aux, lora_rank
        self.lora_alpha = float(lora_alpha if lora_alpha is not None else 2 * lora_rank)
        scale = self.lora_alpha / lora_rank
        g = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.lora = nn.ModuleList()
            for layer in base.model.layers:
                d = nn.ModuleDict()
                for name in LORA_TARGETS:
                    lin = layer.get_submodule(name)
                    d[name.replace(".", "__")] = GatedLoRA(lin.in_features, lin.out_features, lora_rank, scale)
                self.lora.append(d)
        std = float(base.model.embed_tokens.weight.std())
        self.u_embed = nn.Parameter(torch.randn(3, cfg.dim, generator=g) * std)
        self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)

    @property
    def cfg(self) -> LlamaConfig:
        return self.base.cfg

    @property
    def lora_scale(self) -> float:
        return self.lora_alpha / self.lora_rank

    def trainable(self):
        return [self.u_embed] + [p for p in self.lora.parameters()]

    # ---- tensors in file names
    def adapter_tensors(self) -> dict:
        out = {"u_embed.weight": self.u_embed}
        for j, d in enumerate(self.lora):
            for name in LORA_TARGETS:
                m = d[name.replace(".", "__")]
                out[f"layers.{j}.{name}.lora_A"] = m.lora_A
                out[f"layers.{j}.{name}.lora_B"] = m.lora_B
        return out

    def load_adapter(self, tensors: dict):
        with torch.no_grad():
            for n, p in self.adapter_tensors().items():
                p.copy_(tensors[n].to(p.dtype))

    # ---- forward
    def _rope(self, positions: torch.Tensor):
        """positions [B, T] -> cos, sin [B, 1, T, head_dim]."""
        freqs = positions.float()[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[:, None], emb.sin()[:, None]

    def _proj(self, lin: nn.Linear, lora: GatedLoRA, x, gate):
        y = lin(x)
        if gate is not None:
            y = y + gate * lora(x)
        return y

    def _layer(self, j, x, cos, sin, mask, gate, past=None):
        """One decoder layer. x [B, T, H]; mask [B, T, P+T] (True = may attend)
        over the past keys (P, `past` = (k, v) [B, kvh, P, hd]) then these T
        rows; gate [B, T, 1] or None (no LoRA). Returns (x, (k, v) of these rows)."""
        c = self.cfg
        layer = self.base.model.layers[j]
        lo = self.lora[j]
        at = layer.self_attn
        B, T, _ = x.shape
        h = layer.input_layernorm(x)
        q = self._proj(at.q_proj, lo["self_attn__q_proj"], h, gate).view(B, T, c.n_heads, c.head_dim)
        k = self._proj(at.k_proj, lo["self_attn__k_proj"], h, gate).view(B, T, c.n_kv_heads, c.head_dim)
        v = self._proj(at.v_proj, lo["self_attn__v_proj"], h, gate).view(B, T, c.n_kv_heads, c.head_dim)
        if c.qk_norm:
            q, k = at.q_norm(q), at.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        own = (k, v)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        rep = c.n_heads // c.n_kv_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c.head_dim)
        scores = scores.masked_fill(~mask[:, None], float("-inf"))
        y = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, -1)
        x = x + self._proj(at.o_proj, lo["self_attn__o_proj"], y, gate)
        h = layer.post_attention_layernorm(x)
        mlp = layer.mlp
        a = F.silu(self._proj(mlp.gate_proj, lo["mlp__gate_proj"], h, gate)) * \
            self._proj(mlp.up_proj, lo["mlp__up_proj"], h, gate)
        return x + self._proj(mlp.down_proj, lo["mlp__down_proj"], a, gate), own

    def run_rows(self, x, positions, mask, gate, past=None, want_kv=False):
        """Generic forward: x [B, T, H] input rows (token embeddings or
        u_embed), positions [B, T], mask [B, T, P+T], gate [B, T, 1] (1 =
        auxiliary) or None, past: per-layer (k, v) of P earlier rows.
        Returns logits [B, T, V] (and the per-layer (k, v) with want_kv)."""
        cos, sin = self._rope(positions)
        kvs = []
        for j in range(self.cfg.n_layers):
            x, kv = self._layer(j, x, cos, sin, mask, gate, None if past is None else past[j])
            kvs.append(kv)
        logits = self.base.lm_head(self.base.model.norm(x))
        return (logits, kvs) if want_kv else logits

    def _call(self, prefix_tokens: list, verify_tokens: list, groups: dict):
        """One PTP call with proposal groups. groups: {a: [u_0..u_{N-1}]}:
        group a's auxiliary rows stand for token indices P+a+1+j (P =
        len(prefix_tokens)) at those RoPE positions, and see the prefix, verify
        rows 0..a and their own group causally. Returns (teacher logits [m+1, V]
        at the verify rows, {a: aux logits [N, V]})."""
        dev = self.u_embed.device
        P, mv = len(prefix_tokens), len(verify_tokens)
        toks = torch.tensor(list(prefix_tokens) + list(verify_tokens), dtype=torch.long, device=dev)
        T0 = P + mv
        keys = sorted(groups)
        us, pos, vis_tok, grp = [], [], [], []
        for gi, a in enumerate(keys):
            if not 0 <= a < mv:
                raise ValueError(f"group {a} outside the {mv} verify rows")
            for j, u in enumerate(groups[a]):
                us.append(u)
                pos.append(P + a + 1 + j)
                vis_tok.append(P + a + 1)  # sees token rows 0 .. P+a
                grp.append((gi, j))
        Ta = len(us)
        T = T0 + Ta
        mask = torch.zeros(T, T, dtype=torch.bool, device=dev)
        mask[:T0, :T0] = torch.tril(torch.ones(T0, T0, dtype=torch.bool, device=dev))
        for r in range(Ta):
            mask[T0 + r, :vis_tok[r]] = True
            gi, j = grp[r]
            for r2 in range(Ta):
                gi2, j2 = grp[r2]
                if gi2 == gi and j2 <= j:
                    mask[T0 + r, T0 + r2] = True
        emb_tok = self.base.model.embed_tokens(toks)
        emb_aux = piecewise_linear_3(torch.tensor(us, dtype=torch.float32, device=dev), self.u_embed)
        x = torch.cat([emb_tok, emb_aux.to(emb_tok.dtype)], 0)[None]
        positions = torch.tensor(list(range(T0)) + pos, device=dev)[None]
        gate = torch.cat([torch.zeros(T0), torch.ones(Ta)]).to(dev, x.dtype)[None, :, None]
        logits = self.run_rows(x, positions, mask[None], gate)[0]
        teacher = logits[P:T0]
        aux, r = {}, T0
        for a in keys:
            n = len(groups[a])
            aux[a] = logits[r:r + n]
            r += n
        return teacher, aux

    @torch.no_grad()
    def forward_call(self, prefix_tokens: list, verify_tokens: list, u_values: list) -> dict:
        """One PTP call (docs/ptp.md): prefix_tokens (committed, base weights),
        verify_tokens = [last committed token] + the previous call's pending
        proposals (base weights), then len(u_values) auxiliary rows with
        inputs u_embed(u_i) (LoRA on) standing for the token indices right
        after the verify tokens. Returns teacher_logits [len(verify), V]
        (row j: the teacher's logits for token index P+j+1), aux_logits
        [N, V] and proposals (argmax of aux_logits: the one-hot PTP tokens
        for indices P+len(verify) ..)."""
        teacher, aux = self._call(prefix_tokens, verify_tokens, {len(verify_tokens) - 1: list(u_values)})
        al = aux[len(verify_tokens) - 1]
        return {"teacher_logits": teacher, "aux_logits": al, "proposals": al.argmax(-1).tolist()}

    # ---- training forward
    def base_prefix(self, tokens: torch.Tensor):
        """Base pass over [B, S] tokens (no grad): per-layer rotated (k, v) and
        the teacher logits [B, S, V]."""
        with torch.no_grad():
            B, S = tokens.shape
            dev = tokens.device
            pos = torch.arange(S, device=dev)[None].expand(B, S)
            mask = torch.tril(torch.ones(S, S, dtype=torch.bool, device=dev))[None].expand(B, S, S)
            logits, kvs = self.run_rows(self.base.model.embed_tokens(tokens), pos, mask, None, want_kv=True)
        return kvs, logits

    def aux_logits_train(self, kvs, splits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Training layout: for each sequence b, G groups of N auxiliary rows;
        group g stands for token indices splits[b, g] + j (j < N), sees the
        sequence's prefix rows < splits[b, g] (their base K/V in `kvs`) and its
        own group causally. u [B, G, N]. Returns logits [B, G, N, V];
        equals forward_call's proposals with prefix = tokens[:split-1],
        verify = [tokens[split-1]] (tested)."""
        B, G, N = u.shape
        S = kvs[0][0].shape[2]
        dev = u.device
        pos = (splits[:, :, None] + torch.arange(N, device=dev)).reshape(B, G * N)
        pre = torch.arange(S, device=dev)[None, None, :] < splits.repeat_interleave(N, dim=1)[:, :, None]
        gi = torch.arange(G * N, device=dev) // N
        ji = torch.arange(G * N, device=dev) % N
        own = (gi[:, None] == gi[None, :]) & (ji[None, :] <= ji[:, None])
        mask = torch.cat([pre, own[None].expand(B, -1, -1)], dim=2)
        x = piecewise_linear_3(u.reshape(B, G * N), self.u_embed)
        gate = torch.ones(B, G * N, 1, device=dev)
        logits = self.run_rows(x, pos, mask, gate, past=kvs)
        return logits.view(B, G, N, -1)


# ------------------------------------------------------ reference decoders

@torch.no_grad()
def plain_generate(base: Llama, prompt: list, steps: int, temperature: float = 0.0, top_k: int = 0,
                   top_p: float = 1.0, seed: int = 0) -> list:
    """Plain autoregressive decoding: token t (generated index) =
    inverse_cdf(warp(logits), u(seed, t)). KV-cached, one token per call."""
    cache = base.new_cache()
    logits, _ = base(torch.tensor([prompt]), 0, cache)
    pos, out = len(prompt), []
    for t in range(steps):
        tok = inverse_cdf(warp(logits[0, -1], temperature, top_k, top_p), u_value(seed, t))
        out.append(tok)
        if t + 1 == steps:
            break
        logits, _ = base(torch.tensor([[tok]]), pos, cache)
        pos += 1
    return out


@torch.no_grad()
def ptp_generate(model: PtpModel, prompt: list, steps: int, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 0, n_aux: Optional[int] = None, layout: str = "last",
                 stats: Optional[dict] = None) -> list:
    """PTP speculative decoding (docs/ptp.md, "Decoding loop"). Each call:
    verify = [last committed token] + pending proposals (m of them), then
    auxiliary rows: layout "last" = one group of N after all verify rows
    (for indices n+m .. n+m+N-1, n = committed length); layout "all" = one
    group per possible acceptance count a = 0..m (for indices n+a ..). After
    verify() accepts a: commit proposals[:a] + the teacher token at n+a; the
    new pending proposals are the group-for-a proposals after its first one,
    if that first one equals the teacher token (else none). Output = plain
    decoding at the same u: lossless. stats (a dict) gets calls, tokens and
    per-call token counts."""
    if not prompt:
        raise ValueError("ptp_generate needs a non-empty prompt (BOS)")
    N = n_aux or model.n_aux
    x = list(prompt)
    n0 = len(prompt)
    pending: list = []
    calls, per_call = 0, []
    while len(x) - n0 < steps:
        n, m = len(x), len(pending)
        t0 = n - n0  # generated index of token n
        verify_tokens = [x[-1]] + pending
        ga = [m] if layout == "last" else list(range(m + 1))
        groups = {a: u_values(seed, t0 + a, N) for a in ga}
        teacher, aux = model._call(x[:-1], verify_tokens, groups)
        a, toks = verify(teacher, pending, u_values(seed, t0, m + 1), temperature, top_k, top_p)
        calls += 1
        take = toks[:steps - (n - n0)]
        x += take
        per_call.append(len(take))
        nxt = aux.get(a)
        if nxt is not None:
            props = nxt.argmax(-1).tolist()
            pending = props[1:] if props[0] == toks[-1] else []
        else:
            pending = []
    if stats is not None:
        stats.update(calls=stats.get("calls", 0) + calls, tokens=stats.get("tokens", 0) + len(x) - n0,
                     per_call=stats.get("per_call", []) + per_call)
    return x[n0:]


# ---------------------------------------------------------------- format

def ptp_expected_tensors(base, n_aux: int, lora_rank: int) -> list:
    """[(name, shape)] in file order."""
    fp = _fingerprint(base)
    H, Fd = fp["dim"], fp["hidden_dim"]
    Q, K = fp["n_heads"] * fp["head_dim"], fp["n_kv_heads"] * fp["head_dim"]
    io = {"self_attn.q_proj": (H, Q), "self_attn.k_proj": (H, K), "self_attn.v_proj": (H, K),
          "self_attn.o_proj": (Q, H), "mlp.gate_proj": (H, Fd), "mlp.up_proj": (H, Fd),
          "mlp.down_proj": (Fd, H)}
    out = [("u_embed.weight", [3, H])]
    for j in range(fp["n_layers"]):
        for name in LORA_TARGETS:
            d_in, d_out = io[name]
            out += [(f"layers.{j}.{name}.lora_A", [lora_rank, d_in]),
                    (f"layers.{j}.{name}.lora_B", [d_out, lora_rank])]
    return out


def ptp_spec(model: PtpModel) -> dict:
    return {"n_aux": model.n_aux, "lora_rank": model.lora_rank, "lora_alpha": model.lora_alpha,
            "lora_scale": model.lora_scale, "lora_targets": list(LORA_TARGETS),
            "lora_layers": list(range(model.cfg.n_layers)), "u_embed": U_EMBED,
            "u_embed_knots": [0.0, 0.5, 1.0], "variant": "one-hot",
            "u_generator": "splitmix64", "layout": "verify rows then auxiliary rows"}


def export_ptp(model: PtpModel, out_dir: str, metadata: Optional[dict] = None, dtype: str = "F32") -> str:
    """Writes out_dir/head.json + head.safetensors (specline.head.v1, method
    "ptp", docs/ptp.md). Uses heads.py's FORMAT, fingerprint and dtypes; the
    tensor list is ptp_expected_tensors()."""
    fp = _fingerprint(model.cfg)
    expected = ptp_expected_tensors(fp, model.n_aux, model.lora_rank)
    return write_head_dir(out_dir, METHOD, fp, {"ptp": ptp_spec(model)}, expected, model.adapter_tensors(),
                          metadata, dtype)


def load_ptp(dir: str, base: Llama) -> PtpModel:
    """Reads an export back onto `base`, with the loader's checks: format,
    method, base fingerprint (floats to 1e-6 relative), ptp parameters,
    the tensor list and shapes."""
    j = read_head_json(dir, METHOD)
    check_base_fingerprint(dir, j, base.cfg.fingerprint())
    p = j["ptp"]
    if p.get("u_embed") != U_EMBED or list(p.get("lora_targets", [])) != list(LORA_TARGETS):
        raise ValueError(f"{dir}/head.json: unsupported u_embed or lora_targets")
    if abs(p["lora_scale"] - p["lora_alpha"] / p["lora_rank"]) > 1e-9:
        raise ValueError(f"{dir}/head.json: lora_scale != lora_alpha / lora_rank")
    t = load_head_tensors(dir, j, ptp_expected_tensors(j["base"], p["n_aux"], p["lora_rank"]))
    model = PtpModel(base, p["n_aux"], p["lora_rank"], p["lora_alpha"])
    model.load_adapter({k: v.float() for k, v in t.items()})
    model.meta = j
    return model.eval()
