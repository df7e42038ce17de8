"""PIPO (pair-in, pair-out): the model extension, the reference decoder and
the specline.head.v1 "pipo" export (docs/pipo.md).

PIPO is NOT lossless: the second token of a pair is committed by a
confidence head, with no verifier. It is opt-in.

Per pair step i (pair positions = RoPE positions = KV slots, one per pair):

  z^i   = compressor(concat(E[s_{2i}], E[s_{2i+1}]))          [H]
  h_b^i = backbone layers over z^0..z^i (the base's layers, fine-tuned)
  p1    = softmax(lm_head(norm(h_b^i)))         -> token1 = s_{2i+2}
  m^i   = mtp.fc(concat(mtp.norm_e(E[token1]), mtp.norm_h(h_b^i)))
  h_d^i = mtp.layers.0(m^0..m^i)   (own KV cache, causal, RoPE at pair i)
  p2    = softmax(lm_head(mtp.norm(h_d^i)))     -> token2 = s_{2i+3}
  c^i   = sigmoid(confidence.fc2(silu(confidence.fc1(confidence.norm(concat(h_b^i, h_d^i))))))

E is the base's (frozen) token embedding, lm_head the base's (frozen) LM head
(the embedding when tied), norm the base's final RMSNorm (frozen). s is the
pair stream: the prompt padded to even length with PAD, then one pair per
step: (token1, token2) when c^i >= tau, else (token1, PAD). PAD only ever
sits at the odd (second) slot of a pair; it is masked out of both heads'
logits at decode time, so it is never emitted.

Compressor: Linear(2H->2H, bias) -> SiLU -> Linear(2H->H, bias),
initialised to compute a + b exactly (Compressor.init_sum):
  fc1.weight = [[I, I], [-I, -I]], fc1.bias = 0   (units: s = a+b and -s)
  fc2.weight = [I, -I],            fc2.bias = 0
since silu(s) - silu(-s) = s*sigmoid(s) + s*(1 - sigmoid(s)) = s.
"""
from __future__ import annotations

import copy
import os
import sys
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .heads import (_fingerprint, check_base_fingerprint, layer_tensor_shapes, load_head_tensors,
                    read_head_json, write_head_dir)
from .model import DecoderLayer, Llama, LlamaConfig, RMSNorm, file_sha256, load_llama2c, sample_next

METHOD = "pipo"
PAD_ID_STORIES = 0      # <unk> of llama2.c's tok512: the tokenizer (byte fallback) never produces it
TAU_DEFAULT = 0.95      # the paper's default threshold


# ------------------------------------------------------------------ modules

class Compressor(nn.Module):
    """f([a; b]) = fc2(silu(fc1([a; b]))), a, b token embeddings [H]."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.fc1 = nn.Linear(2 * dim, 2 * dim, bias=True)
        self.fc2 = nn.Linear(2 * dim, dim, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(x)))

    @torch.no_grad()
    def init_sum(self):
        """f([a; b]) = a + b exactly (up to float rounding): see the module docstring."""
        H = self.dim
        eye = torch.eye(H)
        self.fc1.weight.copy_(torch.cat([torch.cat([eye, eye], 1), torch.cat([-eye, -eye], 1)], 0))
        self.fc1.bias.zero_()
        self.fc2.weight.copy_(torch.cat([eye, -eye], 1))
        self.fc2.bias.zero_()
        return self


class MtpHead(nn.Module):
    """fc(concat(norm_e(E[token1]), norm_h(h_b))) -> one decoder layer (own KV
    cache) -> h_d (pre-norm); logits = lm_head(norm(h_d))."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        H = cfg.dim
        self.norm_e = RMSNorm(H, cfg.norm_eps)
        self.norm_h = RMSNorm(H, cfg.norm_eps)
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(cfg)])
        self.norm = RMSNorm(H, cfg.norm_eps)

    def forward(self, emb, h_b, cos, sin, cache=None):
        x = self.fc(torch.cat([self.norm_e(emb), self.norm_h(h_b)], dim=-1))
        return self.layers[0](x, cos, sin, cache)


class ConfidenceHead(nn.Module):
    """logit = fc2(silu(fc1(norm(concat(h_b, h_d))))); c = sigmoid(logit).
    No biases (paper, appendix B.3)."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        H = cfg.dim
        self.norm = RMSNorm(2 * H, cfg.norm_eps)
        self.fc1 = nn.Linear(2 * H, H, bias=False)
        self.fc2 = nn.Linear(H, 1, bias=False)

    def forward(self, h_b, h_d):
        return self.fc2(F.silu(self.fc1(self.norm(torch.cat([h_b, h_d], dim=-1)))))[..., 0]


class PipoModel(nn.Module):
    """The PIPO model: `backbone` (a Llama, a copy of the base whose layers
    SFT/OPD fine-tune; embedding, final norm and LM head stay the base's),
    `compressor`, `mtp`, `confidence`. state_dict names of the three heads are
    the export names (compressor.*, mtp.*, confidence.*)."""

    def __init__(self, base: Llama, pad_id: int = PAD_ID_STORIES, tau_default: float = TAU_DEFAULT):
        super().__init__()
        cfg = base.cfg
        if not 0 <= pad_id < cfg.vocab_size:
            raise ValueError(f"pad_id {pad_id} is outside the vocabulary")
        self.cfg, self.pad_id, self.tau_default = cfg, pad_id, tau_default
        self.backbone = copy.deepcopy(base)
        self.compressor = Compressor(cfg.dim)
        self.mtp = MtpHead(cfg)
        self.confidence = ConfidenceHead(cfg)

    @classmethod
    def from_base(cls, base: Llama, pad_id: int = PAD_ID_STORIES, tau_default: float = TAU_DEFAULT,
                  seed: int = 0):
        """Initialisation (our choices where the paper has none for a base without MTP):
        compressor = exact a + b; mtp.layers.0 = copy of the base's last layer;
        mtp.fc = [I, I] (the sum of the two normed inputs); norm_e, norm_h = 1;
        mtp.norm = the base's final norm; confidence: default Linear init for fc1
        (seeded), fc2 = 0 (c = 0.5 everywhere at the start)."""
        torch.manual_seed(seed)
        m = cls(base, pad_id, tau_default)
        H = base.cfg.dim
        with torch.no_grad():
            m.compressor.init_sum()
            m.mtp.layers[0].load_state_dict(base.model.layers[base.cfg.n_layers - 1].state_dict())
            m.mtp.fc.weight.copy_(torch.cat([torch.eye(H), torch.eye(H)], 1))
            m.mtp.norm.weight.copy_(base.model.norm.weight)
            m.confidence.fc2.weight.zero_()
        m.set_trainable()
        return m

    def set_trainable(self, backbone: bool = True):
        """Trainable: compressor, mtp, confidence, and (backbone=True) the
        backbone layers' projection matrices (the authors LoRA-adapt q,k,v,o,
        gate,up,down; we train them fully). Embedding, final norm, LM head and
        the layers' norms stay frozen."""
        for n, p in self.backbone.named_parameters():
            p.requires_grad_(backbone and n.startswith("model.layers.") and n.endswith("_proj.weight"))
        for mod in (self.compressor, self.mtp, self.confidence):
            for p in mod.parameters():
                p.requires_grad_(True)

    def head_state_dict(self) -> dict:
        return {k: v for k, v in self.state_dict().items()
                if k.split(".")[0] in ("compressor", "mtp", "confidence")}

    # ------------------------------------------------------ building blocks

    def embed(self, tokens):
        return self.backbone.model.embed_tokens(tokens)

    def compress(self, stream: torch.Tensor) -> torch.Tensor:
        """stream [B, 2N] token ids -> z [B, N, H] (pair k = stream[2k], stream[2k+1])."""
        B, L = stream.shape
        if L % 2:
            raise ValueError("a pair stream has even length")
        return self.compressor(self.embed(stream).reshape(B, L // 2, 2 * self.cfg.dim))

    def backbone_forward(self, z, start: int = 0, cache=None):
        """z [B, N, H] at pair positions start..start+N-1 -> h_b [B, N, H] (pre-norm)."""
        bb = self.backbone
        cos, sin = bb.rope(torch.arange(start, start + z.shape[1], device=z.device))
        h = z
        for i, layer in enumerate(bb.model.layers):
            h = layer(h, cos, sin, None if cache is None else cache[i])
        return h

    def logits1(self, h_b):
        return self.backbone.lm_head(self.backbone.model.norm(h_b))

    def mtp_forward(self, token1, h_b, start: int = 0, cache=None):
        """token1 [B, N], h_b [B, N, H] at pair positions start.. -> h_d [B, N, H]."""
        cos, sin = self.backbone.rope(torch.arange(start, start + token1.shape[1], device=h_b.device))
        return self.mtp(self.embed(token1), h_b, cos, sin, cache)

    def logits2(self, h_d):
        return self.backbone.lm_head(self.mtp.norm(h_d))

    def forward_pairs(self, stream: torch.Tensor) -> dict:
        """Teacher-forced forward (training and tests). stream [B, 2N+2]: pairs
        0..N-1 are the inputs, pair j+1 holds pair j's targets. Returns
        logits1 [B, N, V] (token1 = stream[2j+2]), logits2 [B, N, V] (token2 =
        stream[2j+3], fed token1 = stream[2j+2] to the MTP), conf_logit [B, N],
        h_b, h_d, targets1, targets2."""
        N = stream.shape[1] // 2 - 1
        h_b = self.backbone_forward(self.compress(stream[:, :2 * N]))
        t1, t2 = stream[:, 2::2], stream[:, 3::2]
        h_d = self.mtp_forward(t1, h_b)
        return {"logits1": self.logits1(h_b), "logits2": self.logits2(h_d),
                "conf_logit": self.confidence(h_b, h_d), "h_b": h_b, "h_d": h_d,
                "targets1": t1, "targets2": t2}


# ------------------------------------------------------------ decoding

def pad_prompt(prompt: list, pad_id: int) -> list:
    """The prompt padded to even length: one PAD appended when odd. The
    prompt must be non-empty and must not contain PAD."""
    if not prompt:
        raise ValueError("empty prompt")
    if pad_id in prompt:
        raise ValueError(f"the prompt contains the PAD id {pad_id}")
    return list(prompt) + ([pad_id] if len(prompt) % 2 else [])


def _mask_pad(logits, pad_id):
    logits = logits.clone()
    logits[..., pad_id] = float("-inf")
    return logits


class PipoState:
    """Decoder state of a batch of sequences (all at the same pair count)."""

    def __init__(self, model: PipoModel):
        self.bb_cache = model.backbone.new_cache()
        self.mtp_cache: dict = {}
        self.pairs = 0             # pairs the backbone has processed (next pair position)
        self.h_last = None         # h_b of pair `pairs - 1` [B, H]
        self.logits1 = None        # lm_head(norm(h_last)) [B, V]


@torch.no_grad()
def pipo_prefill(model: PipoModel, padded: torch.Tensor) -> PipoState:
    """padded [B, 2n] (even-length prompts): the backbone over pairs 0..n-1;
    the MTP layer over pairs 0..n-2 with token1 = padded[2j+2] (the prompt's
    own next pair's first token), so its cache holds one entry per pair
    before the first decode step."""
    st = PipoState(model)
    n = padded.shape[1] // 2
    h = model.backbone_forward(model.compress(padded), 0, st.bb_cache)
    if n > 1:
        model.mtp_forward(padded[:, 2::2], h[:, :n - 1], 0, st.mtp_cache)
    st.pairs, st.h_last = n, h[:, -1]
    st.logits1 = model.logits1(st.h_last)
    return st


@torch.no_grad()
def pipo_heads(model: PipoModel, st: PipoState, tau: float, temperature: float = 0.0,
               generator: Optional[torch.Generator] = None, draw_all: bool = False) -> dict:
    """One step's heads (what the scheduler computes from the last stage's
    h_b): token1 from logits1 (PAD masked), the MTP at pair position
    st.pairs - 1 (its cache grows by one), token2 and the confidence.
    token2 is drawn only for accepted rows (greedy: argmax always reported as
    t2_proposed); draw_all=True draws it for every row (training rollouts).
    Returns t1, t2 (PAD where rejected), t2_proposed, conf, accepted, logits2."""
    l1 = _mask_pad(st.logits1, model.pad_id)
    t1 = sample_next(l1, temperature, 1.0, generator)
    h_d = model.mtp_forward(t1[:, None], st.h_last[:, None], st.pairs - 1, st.mtp_cache)[:, 0]
    l2 = _mask_pad(model.logits2(h_d), model.pad_id)
    conf = torch.sigmoid(model.confidence(st.h_last, h_d))
    acc = conf >= tau
    pad = torch.full_like(t1, model.pad_id)
    if temperature <= 0:
        prop = l2.argmax(-1)
        t2 = torch.where(acc, prop, pad)
    elif draw_all:
        prop = sample_next(l2, temperature, 1.0, generator)
        t2 = torch.where(acc, prop, pad)
    else:
        prop = pad.clone()
        if bool(acc.any()):
            prop[acc] = sample_next(l2[acc], temperature, 1.0, generator)
        t2 = prop
    return {"t1": t1, "t2": t2, "t2_proposed": prop, "conf": conf, "accepted": acc,
            "logits1": l1, "logits2": l2}


@torch.no_grad()
def pipo_feed(model: PipoModel, st: PipoState, t1: torch.Tensor, t2: torch.Tensor):
    """The next pair (t1, t2 or PAD) through compressor + backbone at pair
    position st.pairs (what the stages compute)."""
    h = model.backbone_forward(model.compress(torch.stack([t1, t2], 1)), st.pairs, st.bb_cache)[:, 0]
    st.pairs += 1
    st.h_last, st.logits1 = h, model.logits1(h)


@torch.no_grad()
def pipo_generate(model: PipoModel, prompt: list, max_tokens: int, tau: Optional[float] = None,
                  temperature: float = 0.0, seed: int = 0, return_info: bool = False):
    """The reference decoder (one sequence). Each step: token1 from the
    backbone, token2 from the MTP head, accepted iff confidence >= tau; the
    pair (token1, token2) or (token1, PAD) is fed back. Output: the emitted
    tokens (token1 of every step, token2 of accepted steps), PAD-free,
    truncated to max_tokens. Sampling (temperature > 0) uses one
    torch.Generator(seed): per step one draw for token1, then one for token2
    only if accepted. tau > 1 never accepts (c <= 1): the output then equals
    backbone_pairwise_generate() exactly, RNG draws included."""
    tau = model.tau_default if tau is None else tau
    g = torch.Generator().manual_seed(seed)
    padded = pad_prompt(prompt, model.pad_id)
    dev = next(model.parameters()).device
    st = pipo_prefill(model, torch.tensor([padded], device=dev))
    out, steps, stream = [], [], list(padded)
    while len(out) < max_tokens:
        r = pipo_heads(model, st, tau, temperature, g)
        t1, t2, acc = int(r["t1"][0]), int(r["t2"][0]), bool(r["accepted"][0])
        steps.append({"t1": t1, "t2": t2 if acc else None, "t2_proposed": int(r["t2_proposed"][0]),
                      "conf": float(r["conf"][0]), "accepted": acc})
        out += [t1, t2] if acc else [t1]
        stream += [t1, t2]
        if len(out) >= max_tokens:
            break
        pipo_feed(model, st, r["t1"], r["t2"])
    out = out[:max_tokens]
    if return_info:
        return {"tokens": out, "padded_prompt": padded, "stream": stream, "steps": steps}
    return out


@torch.no_grad()
def backbone_pairwise_generate(model: PipoModel, prompt: list, max_tokens: int,
                               temperature: float = 0.0, seed: int = 0) -> list:
    """PIPO's own backbone decoding pair by pair, written independently of
    the decoder above (no KV cache, no heads): the padded prompt's pairs and
    then one pair (t, PAD) per generated token t, all through compressor +
    backbone from scratch each step; t = argmax (or one draw from
    torch.Generator(seed)) of the last pair's logits1 with PAD masked."""
    g = torch.Generator().manual_seed(seed)
    stream = pad_prompt(prompt, model.pad_id)
    dev = next(model.parameters()).device
    out = []
    while len(out) < max_tokens:
        h = model.backbone_forward(model.compress(torch.tensor([stream], device=dev)))
        t = int(sample_next(_mask_pad(model.logits1(h[:, -1]), model.pad_id), temperature, 1.0, g)[0])
        out.append(t)
        stream += [t, model.pad_id]
    return out


@torch.no_grad()
def pipo_rollout(model: PipoModel, padded: torch.Tensor, n_steps: int, tau, temperature: float,
                 generator: Optional[torch.Generator] = None) -> dict:
    """Batched rollout (training): padded [B, 2n] prompts of one length,
    n_steps pair steps. tau: a float or a [B] tensor. Returns the stream
    [B, 2n + 2*n_steps] (PAD at rejected second slots), the drawn draft
    tokens [B, n_steps] (drawn for every row, also rejected ones), accepted
    [B, n_steps], conf [B, n_steps]."""
    st = pipo_prefill(model, padded)
    pairs, drafts, accs, confs = [], [], [], []
    for k in range(n_steps):
        r = pipo_heads(model, st, 2.0, temperature, generator, draw_all=True)
        acc = r["conf"] >= tau
        t2 = torch.where(acc, r["t2_proposed"], torch.full_like(r["t1"], model.pad_id))
        pairs.append(torch.stack([r["t1"], t2], 1))
        drafts.append(r["t2_proposed"])
        accs.append(acc)
        confs.append(r["conf"])
        if k + 1 < n_steps:
            pipo_feed(model, st, r["t1"], t2)
    return {"stream": torch.cat([padded] + pairs, 1), "drafts": torch.stack(drafts, 1),
            "accepted": torch.stack(accs, 1), "conf": torch.stack(confs, 1)}


# ------------------------------------------------------------ teacher

@torch.no_grad()
def teacher_logprobs(base: Llama, stream: torch.Tensor, pad_id: int):
    """The base model as teacher on a pair stream [B, 2N+2] (PAD compaction,
    as the authors): the base runs on each row with PADs removed; the teacher
    for pair j's token1 is its distribution after the last non-PAD token at or
    before stream position 2j+1, for token2 after stream position 2j+2
    (token1). Returns log-probs lp1, lp2 [B, N, V]."""
    B, L = stream.shape
    N = L // 2 - 1
    keep = stream != pad_id
    idx = keep.long().cumsum(1) - 1            # clean index of the last non-PAD at or before k
    lens = keep.sum(1)
    clean = torch.zeros(B, int(lens.max()), dtype=torch.long, device=stream.device)
    for b in range(B):
        clean[b, :int(lens[b])] = stream[b][keep[b]]
    logits, _ = base(clean)
    lp = torch.log_softmax(logits.float(), -1)
    i1 = idx[:, 1:2 * N:2]                     # positions 2j+1
    i2 = idx[:, 2:2 * N + 1:2]                 # positions 2j+2
    g = lambda i: lp.gather(1, i[..., None].expand(-1, -1, lp.shape[-1]))  # noqa: E731
    return g(i1), g(i2)


# ------------------------------------------------------------ export / load

def expected_pipo_tensors(base) -> list:
    """[(name, shape)] of a pipo head, file order."""
    fp = _fingerprint(base)
    H = fp["dim"]
    out = [("compressor.fc1.weight", [2 * H, 2 * H]), ("compressor.fc1.bias", [2 * H]),
           ("compressor.fc2.weight", [H, 2 * H]), ("compressor.fc2.bias", [H]),
           ("mtp.norm_e.weight", [H]), ("mtp.norm_h.weight", [H]), ("mtp.fc.weight", [H, 2 * H])]
    out += layer_tensor_shapes(fp, "mtp.layers.0.")
    out += [("mtp.norm.weight", [H]), ("confidence.norm.weight", [2 * H]),
            ("confidence.fc1.weight", [H, 2 * H]), ("confidence.fc2.weight", [1, H])]
    return out


def _write_backbone(dir: str, backbone: Llama) -> dict:
    """The fine-tuned backbone next to the head: llama2.c (tied Llama bases),
    else backbone.safetensors in Hugging Face names (the base's config.json
    applies)."""
    c = backbone.cfg
    if c.tied_embeddings and c.arch == "llama" and not c.qkv_bias and not c.qk_norm \
            and c.llama3_scaling is None:
        tdir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        if tdir not in sys.path:
            sys.path.insert(0, tdir)
        from train_base import export_llama2c
        path = os.path.join(dir, "backbone.bin")
        export_llama2c(backbone, path)
        fmt = "llama2c"
    else:
        from safetensors.torch import save_file
        path = os.path.join(dir, "backbone.safetensors")
        sd = {k: v.detach().float().cpu().contiguous() for k, v in backbone.state_dict().items()}
        if c.tied_embeddings:
            sd.pop("lm_head.weight", None)
        save_file(sd, path, metadata={"format": "hf-llama"})
        fmt = "hf-safetensors"
    return {"trained": True, "file": os.path.basename(path), "format": fmt,
            "sha256": file_sha256(path)}


def export_pipo(dir: str, model: PipoModel, metadata: Optional[dict] = None, dtype: str = "F32",
                base_path: Optional[str] = None) -> str:
    """dir/head.json + dir/head.safetensors (specline.head.v1, method
    "pipo") + dir/backbone.bin (the fine-tuned backbone, llama2.c). docs/pipo.md."""
    fp = _fingerprint(model.cfg)
    os.makedirs(dir, exist_ok=True)
    backbone = _write_backbone(dir, model.backbone)
    if base_path:
        backbone["base_sha256"] = file_sha256(base_path)
    H = model.cfg.dim
    params = {"pipo": {
        "pad_id": model.pad_id, "tau_default": model.tau_default, "pair_size": 2,
        "compressor": {"in": 2 * H, "hidden": 2 * H, "out": H, "activation": "silu", "bias": True},
        "mtp": {"n_layers": 1, "fc_input": ["norm_e(embed(token1))", "norm_h(h_b)"],
                "lm_head": "base (shared, frozen)",
                "attention": "full, causal, own KV cache, RoPE at the pair position"},
        "confidence": {"in": 2 * H, "hidden": H, "activation": "silu", "bias": False,
                       "input": ["h_b", "h_d"], "output": "sigmoid"},
        "backbone": backbone}}
    return write_head_dir(dir, METHOD, fp, params, expected_pipo_tensors(fp), model.head_state_dict(),
                          metadata, dtype)


def load_pipo(dir: str, base: Llama) -> PipoModel:
    """Reads an export back into a PipoModel on the base's device: checks the
    format, method, base fingerprint (floats to 1e-6 relative), tensor list
    and shapes, the backbone file's sha256 and config."""
    from safetensors.torch import load_file
    j = read_head_json(dir, METHOD)
    check_base_fingerprint(dir, j, base.cfg.fingerprint())
    t = load_head_tensors(dir, j, expected_pipo_tensors(j["base"]))
    p = j["pipo"]
    m = PipoModel(base, int(p["pad_id"]), float(p["tau_default"]))
    bfile = os.path.join(dir, p["backbone"]["file"])
    if file_sha256(bfile) != p["backbone"]["sha256"]:
        raise ValueError(f"{bfile}: sha256 differs from head.json")
    if p["backbone"]["format"] == "llama2c":
        bb = load_llama2c(bfile)
        if bb.cfg.fingerprint() != base.cfg.fingerprint():
            raise ValueError(f"{bfile}: config differs from the base")
        sd = bb.state_dict()
    else:
        sd = load_file(bfile)
        if base.cfg.tied_embeddings:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    dev = next(base.parameters()).device
    m.backbone.load_state_dict({k: v.to(dev) for k, v in sd.items()})
    missing, unexpected = m.load_state_dict({k: v.float().to(dev) for k, v in t.items()}, strict=False)
    if unexpected or any(k.split(".")[0] != "backbone" for k in missing):
        raise ValueError(f"{dir}: state mismatch {missing} {unexpected}")
    m.set_trainable()
    return m.to(dev).eval()
