"""The SPD speculation module in PyTorch (docs/heads.md "SPD module at run
time", model/drafters/spd_module.h) and its training-time layout (the SPD
paper's appendix A).

Per row (position T, token x_T) at depth d (pipeline stages passed, 0..n):
  g      = fc_i(concat of base hidden states H^j, j in the depth's tap plan)
           v11: fc.i over taps[0..i], i the largest with taps[i] <= d*L//n
           v10: fc.0 over H^0 (d = 0), else fc.d over (H^0, H^{l//2}, H^l),
                l = d*L//n (an index may repeat: the FC sees 3 blocks)
  x      = L_s Llama decoder layers of g (RoPE at the true position, causal)
  logits = lm_head(RMSNorm_base(x))   (the BASE final norm, frozen)
H^0 is the base embedding of the row's token. Module names equal the file's
tensor names (fc.{i}.weight, layers.{j}.*, lm_head.weight): state_dict() is
what export_head() writes; the base embedding and final norm are
non-persistent buffers (frozen, not exported).

Two forwards:
  forward_rows(hidden, depths)   inference semantics: one depth per position,
                                 a plain causal forward over the rows (what
                                 the C++ SpdModule computes for its last row
                                 after any sequence of calls; equals the
                                 float64 golden, tests/data/spd_module/).
  forward_fill(hidden, active)   training: for EVERY position t at once, the
                                 logits the module gives for x_{t+1} when t
                                 is the newest row (depth 0) and the pipeline
                                 holds `active` rows (per sequence): rows
                                 t-a+1..t at depths a-1..0, earlier rows at n
                                 (the paper's Eq. 2 / Eq. 3 layout).

forward_fill uses the paper's expanded layout (appendix A.1): every position
is replicated into n+1 depth blocks g^0..g^n, with the structural mask of
A.3 (a row of block j at t sees block k at T <= t iff k is the depth T has
from that query's point of view). With L_s = 1 only the g^0 block serves as
queries (A.3), which is exact. With L_s > 1 the lower layers also run the
in-flight blocks as queries, each under the depth schedule of the one g^0
query that uses it (row (T, j) with j < a belongs to query t = T + j only),
so the result is exactly the inference forward too (the paper's shortcut of
keeping only g^0 queries in every layer is not exact for L_s > 1); the last
layer again runs only the g^0 block.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .heads import spd_default_taps, spd_v10_taps
from .model import DecoderLayer, Llama, LlamaConfig, Rope, causal_attention, rotate_half


def feature_plan(layout: str, taps: Sequence[int], n_layers: int, n_stages: int, depth: int):
    """(fc index, hidden-state indices concatenated, repeats kept) at `depth`:
    SpdModule's Feature table (model/drafters/spd_module.cc)."""
    lmax = depth * n_layers // n_stages
    if layout == "v11":
        i = max(k for k, t in enumerate(taps) if t <= lmax)
        return i, list(taps[:i + 1])
    if layout == "v10":
        return (0, [0]) if depth == 0 else (depth, [0, lmax // 2, lmax])
    raise ValueError(f"feature_layout must be v11 or v10, got {layout!r}")


def taps_for_depth(layout, taps, n_layers, n_stages, depth) -> list:
    return sorted(set(feature_plan(layout, taps, n_layers, n_stages, depth)[1]))


class SpdModule(nn.Module):
    method = "spd"
    exit_layer = None

    def __init__(self, cfg: LlamaConfig, n_stages: int, n_layers: int = 1, layout: str = "v11",
                 taps: Optional[Sequence[int]] = None, embed: Optional[torch.Tensor] = None,
                 norm: Optional[torch.Tensor] = None):
        super().__init__()
        L = cfg.n_layers
        if not 2 <= n_stages <= L or n_layers < 1:
            raise ValueError(f"bad SPD shape: n_stages {n_stages}, n_layers {n_layers}, base layers {L}")
        if taps is None:
            taps = spd_default_taps(L, n_stages) if layout == "v11" else spd_v10_taps(L, n_stages)
        self.cfg, self.n, self.ls, self.layout, self.taps = cfg, n_stages, n_layers, layout, list(taps)
        self.plans = [feature_plan(layout, self.taps, L, n_stages, d) for d in range(n_stages + 1)]
        widths = [1] + [3] * n_stages if layout == "v10" else list(range(1, len(self.taps) + 1))
        self.fc = nn.ModuleList(nn.Linear(w * cfg.dim, cfg.dim, bias=False) for w in widths)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(n_layers))
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.rope = Rope(cfg)
        self.register_buffer("base_embed", embed if embed is not None else
                             torch.zeros(cfg.vocab_size, cfg.dim), persistent=False)
        self.register_buffer("base_norm", norm if norm is not None else torch.ones(cfg.dim),
                             persistent=False)

    # ---------------------------------------------------------------- spec
    def spd_spec(self) -> dict:
        return {"n_stages": self.n, "taps": list(self.taps), "n_layers": self.ls,
                "feature_layout": self.layout}

    def all_taps(self) -> list:
        return sorted({j for _, idx in self.plans for j in idx})

    def final(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.cfg.norm_eps)
        return self.lm_head(self.base_norm * y.to(x.dtype))

    def features(self, tokens: torch.Tensor, hidden) -> torch.Tensor:
        """g for every depth: [n+1, B, T, H]. hidden[j] = base H^j [B, T, H]
        (HF numbering; hidden[0] is replaced by the module's own embedding
        lookup, as in C++); only the indices of all_taps() are read."""
        h0 = F.embedding(tokens, self.base_embed)
        get = lambda j: h0 if j == 0 else hidden[j]  # noqa: E731
        return torch.stack([self.fc[i](torch.cat([get(j) for j in idx], -1)) for i, idx in self.plans])

    # ------------------------------------------------- inference semantics
    def forward_rows(self, tokens: torch.Tensor, hidden, depths: torch.Tensor) -> torch.Tensor:
        """tokens [B, T], depths [B, T] or [T] (0..n), positions 0..T-1 ->
        logits [B, T, V] of a plain causal forward over one feature per
        position (the C++ module's semantics)."""
        g = self.features(tokens, hidden)  # [n+1, B, T, H]
        B, T = tokens.shape
        d = depths.expand(B, T) if depths.dim() == 1 else depths
        x = g.permute(1, 2, 0, 3).gather(2, d[..., None, None].expand(B, T, 1, g.shape[-1]))[:, :, 0]
        cos, sin = self.rope(torch.arange(T, device=tokens.device))
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.final(x)

    # ------------------------------------------------ training (appendix A)
    def fill_mask(self, T: int, active: torch.Tensor, query_blocks: int) -> torch.Tensor:
        """Structural mask [B, 1, query_blocks*T, (n+1)*T] over the expanded
        layout (block k = all positions at depth k, block-major). Row (j, t)
        sees (k, T') iff T' <= t and k == want, want = j + t - T' when j < n
        and that is < a (in flight from the owning query's view), else n."""
        n = self.n
        dev = active.device
        t = torch.arange(T, device=dev)
        j = torch.arange(query_blocks, device=dev)
        k = torch.arange(n + 1, device=dev)
        dist = t[:, None] - t[None, :]                               # [t, T']
        rel = j[:, None, None] + dist[None]                          # [j, t, T']
        a = active.view(-1, 1, 1, 1)
        want = torch.where((j[None, :, None, None] < n) & (rel[None] < a), rel[None],
                           torch.full_like(rel[None], n))            # [B, j, t, T']
        ok = (want[:, :, :, None, :] == k[None, None, None, :, None]) & (dist >= 0)[None, None, :, None, :]
        B = active.shape[0]
        return ok.reshape(B, 1, query_blocks * T, (n + 1) * T)

    def _attend(self, layer: DecoderLayer, xq, xkv, pos_q, pos_kv, mask):
        c, at = self.cfg, layer.self_attn
        B, Tq, _ = xq.shape
        Tk = xkv.shape[1]
        hq = layer.input_layernorm(xq)
        hk = layer.input_layernorm(xkv)
        q = at.q_proj(hq).view(B, Tq, c.n_heads, c.head_dim)
        k = at.k_proj(hk).view(B, Tk, c.n_kv_heads, c.head_dim)
        v = at.v_proj(hk).view(B, Tk, c.n_kv_heads, c.head_dim)
        if c.qk_norm:
            q, k = at.q_norm(q), at.k_norm(k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cq, sq = self.rope(pos_q)
        ck, sk = self.rope(pos_kv)
        q = q * cq + rotate_half(q) * sq
        k = k * ck + rotate_half(k) * sk
        rep = c.n_heads // c.n_kv_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = causal_attention(q, k, v, mask)
        x = xq + at.o_proj(y.transpose(1, 2).reshape(B, Tq, -1))
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def forward_fill(self, tokens: torch.Tensor, hidden, active) -> torch.Tensor:
        """Logits [B, T, V]: row t = the module's draft for x_{t+1} when t is
        the newest row (depth 0) and `active` (int or [B]) rows are in the
        pipeline: depth(T') = t - T' if t - T' < a else n. active = n is the
        steady state (Eq. 2), 1..n-1 a warm-up (Eq. 3)."""
        B, T = tokens.shape
        n = self.n
        if not torch.is_tensor(active):
            active = torch.full((B,), int(active), device=tokens.device)
        g = self.features(tokens, hidden)                           # [n+1, B, T, H]
        x = g.permute(1, 0, 2, 3).reshape(B, (n + 1) * T, -1)       # block-major
        pos = torch.arange(T, device=tokens.device).repeat(n + 1)
        full = self.fill_mask(T, active, n + 1) if self.ls > 1 else None
        for li, layer in enumerate(self.layers):
            if li + 1 < self.ls:   # lower layers: every block is a query
                x = self._attend(layer, x, x, pos, pos, full)
            else:                  # last layer: only the g^0 block (appendix A.3)
                m = full[:, :, :T] if full is not None else self.fill_mask(T, active, 1)
                x = self._attend(layer, x[:, :T], x, pos[:T], pos, m)
        return self.final(x)

    # ---------------------------------------------------------------- build
    @classmethod
    def from_base(cls, base: Llama, n_stages: int, n_layers: int = 1, layout: str = "v11",
                  taps=None, init_layers: str = "last") -> "SpdModule":
        """Initialisation (documented in RECIPES.md):
          lm_head  copied from the base's (the paper);
          fc.i     identity on the deepest tapped block, zero on the others,
                   so g = H^{deepest tap available at that depth};
          layers   init_layers="last": copies of the base's last L_s layers
                   (so a finalized row tapped at L-1 starts as the base's
                   own last layer); "random": fresh Llama-style init."""
        m = cls(base.cfg, n_stages, n_layers, layout, taps,
                embed=base.model.embed_tokens.weight.detach().clone(),
                norm=base.model.norm.weight.detach().clone())
        dim = base.cfg.dim
        with torch.no_grad():
            m.lm_head.weight.copy_(base.lm_head.weight)
            for fc in m.fc:
                fc.weight.zero_()
                fc.weight[:, -dim:].copy_(torch.eye(dim))
            if init_layers == "last":
                L = base.cfg.n_layers
                for j in range(n_layers):
                    src = L - n_layers + j
                    m.layers[j].load_state_dict(base.model.layers[max(src, 0)].state_dict())
            elif init_layers != "random":
                raise ValueError(f"init_layers must be 'last' or 'random', got {init_layers!r}")
        return m

    @classmethod
    def from_dir(cls, dir: str, base: Llama) -> "SpdModule":
        from .heads import load_head
        j, t = load_head(dir, base.cfg)
        if j["method"] != "spd":
            raise ValueError(f"{dir}: method {j['method']} is not spd")
        s = j["spd"]
        m = cls(base.cfg, s["n_stages"], s["n_layers"], s.get("feature_layout", "v11"), s["taps"],
                embed=base.model.embed_tokens.weight.detach().clone(),
                norm=base.model.norm.weight.detach().clone())
        m.load_state_dict(t)
        return m.eval()
