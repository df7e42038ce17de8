"""PPSD draft heads and the specline.head.v1 writer / reader (docs/heads.md).

  NormHead   ("ppsd-norm"):  logits = lm_head(RMSNorm(h_E))
  LayerHead  ("ppsd-layer"): logits = lm_head(RMSNorm(Layer(h_E))), the layer
             causal over the sequence's earlier positions, RoPE at the true
             position.

h_E is the base's hidden state after the first E layers (Hugging Face index
E, before any final norm). Both heads are initialised from the base as the
papers do: norm and lm_head copied from the base's final norm and LM head
(the embedding when tied); the layer head's decoder layer is copied from the
base's layer E (the layer that follows the exit), or left random with
init_layer="random".

Module names equal the file's tensor names (layers.0.self_attn.q_proj.weight,
norm.weight, lm_head.weight), so state_dict() is what export_head() writes.
"""
from __future__ import annotations

import copy
import datetime
import json
import os
from typing import Optional

import torch
from torch import nn

from .model import DecoderLayer, Llama, LlamaConfig, RMSNorm, Rope

FORMAT = "specline.head.v1"
METHODS = ("ppsd-norm", "ppsd-layer", "spd")


class NormHead(nn.Module):
    method = "ppsd-norm"

    def __init__(self, cfg: LlamaConfig, exit_layer: int):
        super().__init__()
        self.cfg, self.exit_layer = cfg, exit_layer
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def forward(self, h: torch.Tensor, start_pos: int = 0, cache=None) -> torch.Tensor:
        """h [B, T, H] hidden states after layer E -> logits [B, T, V]."""
        return self.lm_head(self.norm(h))

    @classmethod
    def from_base(cls, base: Llama, exit_layer: int, **_):
        head = cls(base.cfg, exit_layer)
        _copy_output(head, base)
        return head


class LayerHead(nn.Module):
    method = "ppsd-layer"

    def __init__(self, cfg: LlamaConfig, exit_layer: int):
        super().__init__()
        self.cfg, self.exit_layer = cfg, exit_layer
        self.layers = nn.ModuleList([DecoderLayer(cfg)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.rope = Rope(cfg)  # non-persistent buffer: not in state_dict()

    def forward(self, h: torch.Tensor, start_pos: int = 0, cache=None) -> torch.Tensor:
        """h [B, T, H] at positions start_pos.. -> logits [B, T, V]. `cache`
        (a dict) holds the layer's K/V of earlier positions, as on a stage."""
        cos, sin = self.rope(torch.arange(start_pos, start_pos + h.shape[1], device=h.device))
        return self.lm_head(self.norm(self.layers[0](h, cos, sin, cache)))

    @classmethod
    def from_base(cls, base: Llama, exit_layer: int, init_layer: str = "copy"):
        head = cls(base.cfg, exit_layer)
        _copy_output(head, base)
        if init_layer == "copy":
            head.layers[0].load_state_dict(base.model.layers[exit_layer].state_dict())
        elif init_layer != "random":
            raise ValueError(f"init_layer must be 'copy' or 'random', got {init_layer!r}")
        return head


HEADS = {"ppsd-norm": NormHead, "ppsd-layer": LayerHead}


def _copy_output(head: nn.Module, base: Llama):
    with torch.no_grad():
        head.norm.weight.copy_(base.model.norm.weight)
        head.lm_head.weight.copy_(base.lm_head.weight)  # the embedding when tied


def make_head(method: str, base: Llama, exit_layer: int, **kw) -> nn.Module:
    if not 1 <= exit_layer < base.cfg.n_layers:
        raise ValueError(f"exit_layer {exit_layer} is not in [1, {base.cfg.n_layers})")
    return HEADS[method].from_base(base, exit_layer, **kw)


# ------------------------------------------------------------ the format

def _fingerprint(base) -> dict:
    return base.fingerprint() if isinstance(base, LlamaConfig) else dict(base)


def layer_tensor_shapes(fp: dict, prefix: str) -> list:
    dim, hid = fp["dim"], fp["hidden_dim"]
    q, kv = fp["n_heads"] * fp["head_dim"], fp["n_kv_heads"] * fp["head_dim"]
    out = [(prefix + "input_layernorm.weight", [dim]),
           (prefix + "self_attn.q_proj.weight", [q, dim]),
           (prefix + "self_attn.k_proj.weight", [kv, dim]),
           (prefix + "self_attn.v_proj.weight", [kv, dim])]
    if fp["qkv_bias"]:
        out += [(prefix + "self_attn.q_proj.bias", [q]), (prefix + "self_attn.k_proj.bias", [kv]),
                (prefix + "self_attn.v_proj.bias", [kv])]
    if fp["qk_norm"]:
        out += [(prefix + "self_attn.q_norm.weight", [fp["head_dim"]]),
                (prefix + "self_attn.k_norm.weight", [fp["head_dim"]])]
    out += [(prefix + "self_attn.o_proj.weight", [dim, q]),
            (prefix + "post_attention_layernorm.weight", [dim]),
            (prefix + "mlp.gate_proj.weight", [hid, dim]),
            (prefix + "mlp.up_proj.weight", [hid, dim]),
            (prefix + "mlp.down_proj.weight", [dim, hid])]
    return out


def expected_tensors(method: str, base, exit_layer: Optional[int] = None,
                     spd: Optional[dict] = None) -> list:
    """[(name, shape)] in file order: ExpectedDraftHeadTensors in
    model/formats/head_file.cc (each method's tensors: head_<method>.cc)."""
    fp = _fingerprint(base)
    dim, V, L = fp["dim"], fp["vocab_size"], fp["n_layers"]
    if method in ("ppsd-norm", "ppsd-layer"):
        if exit_layer is None or not 1 <= exit_layer < L:
            raise ValueError(f"exit_layer {exit_layer} is not in [1, {L})")
        out = layer_tensor_shapes(fp, "layers.0.") if method == "ppsd-layer" else []
        return out + [("norm.weight", [dim]), ("lm_head.weight", [V, dim])]
    if method == "spd":
        n, taps, ls = spd["n_stages"], list(spd["taps"]), spd["n_layers"]
        layout = spd.get("feature_layout", "v11")
        if not 2 <= n <= L or ls < 1 or not taps or taps[0] != 0 or \
                any(b <= a for a, b in zip(taps, taps[1:])) or taps[-1] > L:
            raise ValueError(f"bad spd parameters {spd}")
        widths = [1] + [3] * n if layout == "v10" else list(range(1, len(taps) + 1))
        out = [(f"fc.{i}.weight", [dim, w * dim]) for i, w in enumerate(widths)]
        for j in range(ls):
            out += layer_tensor_shapes(fp, f"layers.{j}.")
        return out + [("lm_head.weight", [V, dim])]
    raise ValueError(f"unknown method {method!r} (expected one of {METHODS})")


def spd_default_taps(n_layers: int, n_stages: int) -> list:
    """v11 default taps (SpdDefaultTaps): [0, L/n, 3L/n, 6L/n, L-1] clamped to
    [0, L-1], deduplicated."""
    per = n_layers // n_stages
    return sorted({min(max(b, 0), n_layers - 1) for b in (0, per, 3 * per, 6 * per, n_layers - 1)})


def spd_v10_taps(n_layers: int, n_stages: int) -> list:
    """v10 taps (SpdV10Taps): union over k = 1..n of {0, l/2, l}, l = k*L/n."""
    s = {0}
    for k in range(1, n_stages + 1):
        lm = k * n_layers // n_stages
        s |= {lm // 2, lm}
    return sorted(s)


_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def export_head(dir: str, method: str, exit_layer: Optional[int], base_config, tensors: dict,
                metadata: Optional[dict] = None, spd: Optional[dict] = None,
                dtype: str = "F32") -> str:
    """Writes dir/head.json + dir/head.safetensors (specline.head.v1).

    base_config: the base's LlamaConfig (or its fingerprint dict); tensors:
    name -> tensor, exactly the names and shapes of expected_tensors();
    metadata: free-form provenance (JSON-serialisable); "created" is added
    when absent. Returns dir."""
    fp = _fingerprint(base_config)
    expected = expected_tensors(method, fp, exit_layer, spd)
    if method == "spd":
        params = {"spd": {"n_stages": spd["n_stages"], "taps": list(spd["taps"]),
                          "n_layers": spd["n_layers"], "feature_layout": spd.get("feature_layout", "v11")}}
    else:
        params = {"exit_layer": exit_layer}
    return write_head_dir(dir, method, fp, params, expected, tensors, metadata, dtype)


def write_head_dir(dir: str, method: str, fp: dict, params: dict, expected, tensors: dict,
                   metadata: Optional[dict] = None, dtype: str = "F32") -> str:
    """The writer every method shares: checks `tensors` against the expected
    (name, shape) list, writes head.safetensors in `dtype` and head.json
    (format, method, base fingerprint, the method's `params`, dtype, tensor
    shapes, metadata with "created" added when absent). Returns dir."""
    from safetensors.torch import save_file
    names = [n for n, _ in expected]
    missing = [n for n in names if n not in tensors]
    extra = sorted(set(tensors) - set(names))
    if missing or extra:
        raise ValueError(f"{method} tensors: missing {missing}, unexpected {extra}")
    for n, shape in expected:
        if list(tensors[n].shape) != shape:
            raise ValueError(f"{method} tensor {n}: shape {list(tensors[n].shape)}, expected {shape}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {list(_DTYPES)}")
    os.makedirs(dir, exist_ok=True)
    out = {n: tensors[n].detach().to("cpu", _DTYPES[dtype]).contiguous() for n in names}
    save_file(out, os.path.join(dir, "head.safetensors"), metadata={"format": FORMAT})
    meta = dict(metadata or {})
    meta.setdefault("created", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    j = {"format": FORMAT, "method": method, "base": fp, **params, "dtype": dtype,
         "tensors": {n: s for n, s in expected}, "metadata": meta}
    with open(os.path.join(dir, "head.json"), "w") as f:
        json.dump(j, f, indent=2)
        f.write("\n")
    return dir


def export_module(dir: str, head: nn.Module, metadata: Optional[dict] = None, dtype: str = "F32") -> str:
    """export_head() for a NormHead / LayerHead."""
    return export_head(dir, head.method, head.exit_layer, head.cfg, head.state_dict(), metadata,
                       dtype=dtype)


def load_head(dir: str, base: Optional[LlamaConfig] = None):
    """Reads a head directory back: (head.json as a dict, {name: float32
    tensor}); checks the format, the tensor list against head.json and the
    method's expected shapes, and the base fingerprint when `base` is given
    (floats to 1e-6 relative, as the C++ loader)."""
    with open(os.path.join(dir, "head.json")) as f:
        j = json.load(f)
    if j.get("format") != FORMAT:
        raise ValueError(f"{dir}/head.json: format is {j.get('format')!r}, expected {FORMAT!r}")
    if base is not None:
        check_base_fingerprint(dir, j, base.fingerprint())
    expected = expected_tensors(j["method"], j["base"], j.get("exit_layer"), j.get("spd"))
    t = load_head_tensors(dir, j, expected)
    return j, {k: v.float() for k, v in t.items()}


def read_head_json(dir: str, method: str) -> dict:
    """head.json of a head directory that must be of `method`."""
    with open(os.path.join(dir, "head.json")) as f:
        j = json.load(f)
    if j.get("format") != FORMAT or j.get("method") != method:
        raise ValueError(f"{dir}/head.json: format/method {j.get('format')!r}/{j.get('method')!r}, "
                         f"expected {FORMAT!r}/{method!r}")
    return j


def check_base_fingerprint(dir: str, j: dict, want: dict) -> None:
    """head.json's "base" must equal the model's fingerprint (floats to 1e-6
    relative), as the C++ loader checks."""
    for k, v in want.items():
        got = j["base"].get(k)
        ok = (abs(got - v) <= 1e-6 * max(abs(v), 1e-30)) if isinstance(v, float) and got is not None \
            else got == v
        if not ok:
            raise ValueError(f"{dir}/head.json: base.{k} is {got!r}, the model has {v!r}")


def load_head_tensors(dir: str, j: dict, expected) -> dict:
    """head.safetensors, checked against the expected (name, shape) list and
    head.json's "tensors"."""
    from safetensors.torch import load_file
    if {n: s for n, s in expected} != j["tensors"]:
        raise ValueError(f"{dir}/head.json: 'tensors' differs from the expected list")
    t = load_file(os.path.join(dir, "head.safetensors"))
    if set(t) != {n for n, _ in expected}:
        raise ValueError(f"{dir}/head.safetensors: tensors {sorted(t)} differ from the expected list")
    for n, s in expected:
        if list(t[n].shape) != s:
            raise ValueError(f"{dir}/head.safetensors: {n} has shape {list(t[n].shape)}, expected {s}")
    return t


def head_from_dir(dir: str, base: Llama) -> nn.Module:
    """A NormHead / LayerHead module holding a saved PPSD head's weights."""
    j, t = load_head(dir, base.cfg)
    if j["method"] not in HEADS:
        raise ValueError(f"{dir}: method {j['method']} is not a PPSD head")
    head = HEADS[j["method"]](base.cfg, j["exit_layer"])
    head.load_state_dict(t)
    return head.eval()
