"""The PTP and PIPO goldens against an outside reference.

tests/data/ptp_golden.json and pipo_golden.json are made by the project's
own Python (specline_train.ptp / .pipo, PyTorch), and the C++ tests
(ptp_coupling_test, scheduler_ptp_test, pipo_model_test) are checked
against them. So that C++ and its Python twin cannot agree on the same
mistake, this file recomputes the goldens with a second implementation
that imports nothing of ours (and not PyTorch): plain NumPy loops, float64,
written from the specifications only:

  * the base model: Andrej Karpathy's llama2.c `run.c` (checkpoint layout,
    interleaved RoPE pairs, RMSNorm eps 1e-5, SwiGLU, tied classifier),
    itself checked first against run.c's own greedy text
    (`reference-greedy-from-bos-256.txt`, decoded with tok512.bin as run.c
    decodes);
  * PTP: the paper (Draxler et al., /work/shared/papers/
    ptp-parallel-token-prediction.txt): Eq. 2 (Pick: the smallest j with
    F_j > u), Eq. 5 (O-PTP proposal = argmax of the auxiliary row) and
    Algorithm 1 (accept the leading proposals equal to the teacher's pick
    at the same u, plus one teacher token); docs/ptp.md for the pieces the
    paper leaves open (u_embed, gated LoRA, u generator = Vigna's
    SplitMix64, layout "last");
  * PIPO: docs/pipo.md's step equations (compressor, backbone at pair
    positions, MTP layer with Hugging Face rotate_half RoPE, confidence
    head, tau).

The adapters are read from head.safetensors by a 20-line parser of the
safetensors format (8-byte header length, JSON header, raw little-endian
data). Plus cases worked by hand: the paper's Eq. 2 on a 4-token
distribution, docs/ptp.md's worked example of Algorithm 1, the warp rules,
and SplitMix64's published outputs.
"""
import json
import os
import struct
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARED = os.path.join(REPO, "..", "shared", "models", "stories260K")
STORIES_BIN = os.path.join(SHARED, "stories260K.bin")
TOKENIZER_BIN = os.path.join(SHARED, "tok512.bin")
RUN_C_TEXT = os.path.join(SHARED, "reference-greedy-from-bos-256.txt")
PTP_HEAD = os.path.join(REPO, "training", "heads", "stories260K", "ptp")
PIPO_HEAD = os.path.join(REPO, "training", "heads", "stories260K", "pipo")
PTP_GOLDEN = os.path.join(HERE, "data", "ptp_golden.json")
PIPO_GOLDEN = os.path.join(HERE, "data", "pipo_golden.json")

M64 = (1 << 64) - 1


def need(*paths):
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise unittest.SkipTest("absent: " + ", ".join(missing))


# --- file readers (no project code) ------------------------------------------

def read_llama2c(path):
    """A llama2.c v0 checkpoint as run.c's read_checkpoint lays it out."""
    with open(path, "rb") as f:
        dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = struct.unpack("<7i", f.read(28))
        data = np.frombuffer(f.read(), dtype="<f4").astype(np.float64)
    shared = vocab > 0
    vocab = abs(vocab)
    hs = dim // n_heads
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        out = data[pos:pos + n].reshape(shape)
        pos += n
        return out

    w = {"dim": dim, "hidden": hidden, "n_layers": n_layers, "n_heads": n_heads, "n_kv": n_kv,
         "vocab": vocab, "head_size": hs}
    w["emb"] = take(vocab, dim)
    w["rms_att"] = take(n_layers, dim)
    w["wq"] = take(n_layers, dim, dim)
    w["wk"] = take(n_layers, n_kv * hs, dim)
    w["wv"] = take(n_layers, n_kv * hs, dim)
    w["wo"] = take(n_layers, dim, dim)
    w["rms_ffn"] = take(n_layers, dim)
    w["w1"] = take(n_layers, hidden, dim)
    w["w2"] = take(n_layers, dim, hidden)
    w["w3"] = take(n_layers, hidden, dim)
    w["rms_final"] = take(dim)
    take(seq_len, hs // 2)  # freq_cis_real (unused by run.c)
    take(seq_len, hs // 2)  # freq_cis_imag
    w["wcls"] = w["emb"] if shared else take(vocab, dim)
    assert pos == data.size, "checkpoint size"
    return w


def read_safetensors(path):
    """name -> float64 array; F32 only (what the committed heads use)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        raw = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[a:b], dtype="<f4").astype(np.float64).reshape(t["shape"])
    return out


def llama2c_decode(tokens, bos=1):
    """run.c's decode(): pieces from tok512.bin, the leading space dropped
    after BOS, <0xHH> pieces as raw bytes."""
    with open(TOKENIZER_BIN, "rb") as f:
        f.read(4)  # max_token_length
        pieces = []
        while True:
            head = f.read(8)
            if len(head) < 8:
                break
            _, n = struct.unpack("<fi", head)
            pieces.append(f.read(n))
    out = b""
    prev = bos
    for t in tokens:
        p = pieces[t]
        if prev == bos and p.startswith(b" "):
            p = p[1:]
        if len(p) == 6 and p.startswith(b"<0x") and p.endswith(b">"):
            p = bytes([int(p[3:5], 16)])
        out += p
        prev = t
    return out.decode("utf-8", errors="replace")


# --- the model, as run.c computes it (float64, no cache) --------------------

def rmsnorm(x, w, eps=1e-5):
    return w * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def silu(x):
    return x / (1.0 + np.exp(-x))


def rope_interleaved(x, positions, n_heads, hs):
    """run.c: pairs (2i, 2i+1) of each head rotated by pos * 10000^(-2i/hs)."""
    x = x.reshape(len(positions), n_heads, hs // 2, 2).copy()
    freq = 1.0 / 10000.0 ** (np.arange(0, hs, 2) / hs)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * freq[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., 0].copy(), x[..., 1].copy()
    x[..., 0] = x0 * c - x1 * s
    x[..., 1] = x0 * s + x1 * c
    return x.reshape(len(positions), n_heads * hs)


def rope_half(x, positions, n_heads, hs, theta=10000.0):
    """Hugging Face rotate_half: dims (i, i + hs/2) of each head are a pair."""
    x = x.reshape(len(positions), n_heads, hs)
    freq = 1.0 / theta ** (np.arange(0, hs, 2) / hs)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * freq[None, :]
    c = np.concatenate([np.cos(ang), np.cos(ang)], axis=1)[:, None, :]
    s = np.concatenate([np.sin(ang), np.sin(ang)], axis=1)[:, None, :]
    rot = np.concatenate([-x[..., hs // 2:], x[..., :hs // 2]], axis=-1)
    return (x * c + rot * s).reshape(len(positions), n_heads * hs)


def attention(q, k, v, n_heads, n_kv, hs, allowed):
    """Causal (or masked) multi-head attention with GQA, one head at a time."""
    n = q.shape[0]
    out = np.zeros((n, n_heads * hs))
    for h in range(n_heads):
        kh = h // (n_heads // n_kv)
        qh = q[:, h * hs:(h + 1) * hs]
        khh = k[:, kh * hs:(kh + 1) * hs]
        vh = v[:, kh * hs:(kh + 1) * hs]
        scores = qh @ khh.T / np.sqrt(hs)
        scores = np.where(allowed, scores, -np.inf)
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=1, keepdims=True)
        out[:, h * hs:(h + 1) * hs] = p @ vh
    return out


def lin(x, w, lora=None, rows=None):
    """x @ w.T, plus the gated LoRA term scale * B (A x) on `rows` only."""
    y = x @ w.T
    if lora is not None:
        a, b, scale = lora
        y[rows] += scale * (x[rows] @ a.T) @ b.T
    return y


def llama_layers(w, x, positions, lora=None, lora_rows=None):
    """run.c's transformer() over all rows at once: causal attention,
    interleaved RoPE at `positions`. Returns the last layer's output (before
    the final norm). `lora`: per layer, name -> (A, B, scale)."""
    n = x.shape[0]
    allowed = np.tril(np.ones((n, n), dtype=bool))
    nh, nkv, hs = w["n_heads"], w["n_kv"], w["head_size"]
    for layer in range(w["n_layers"]):
        lo = (lambda name: lora[layer].get(name)) if lora else (lambda name: None)
        xb = rmsnorm(x, w["rms_att"][layer])
        q = rope_interleaved(lin(xb, w["wq"][layer], lo("q"), lora_rows), positions, nh, hs)
        k = rope_interleaved(lin(xb, w["wk"][layer], lo("k"), lora_rows), positions, nkv, hs)
        v = lin(xb, w["wv"][layer], lo("v"), lora_rows)
        x = x + lin(attention(q, k, v, nh, nkv, hs, allowed), w["wo"][layer], lo("o"), lora_rows)
        xb = rmsnorm(x, w["rms_ffn"][layer])
        h = silu(lin(xb, w["w1"][layer], lo("gate"), lora_rows)) * lin(xb, w["w3"][layer], lo("up"), lora_rows)
        x = x + lin(h, w["w2"][layer], lo("down"), lora_rows)
    return x


def logits_of(w, h):
    return rmsnorm(h, w["rms_final"]) @ w["wcls"].T


def greedy_from_bos(w, steps):
    """run.c's generate() from BOS: `steps` tokens, stopping at BOS; one row
    at a time with a KV cache, as run.c's forward() does."""
    nh, nkv, hs, L = w["n_heads"], w["n_kv"], w["head_size"], w["n_layers"]
    keys = [np.zeros((0, nkv * hs)) for _ in range(L)]
    values = [np.zeros((0, nkv * hs)) for _ in range(L)]
    toks = [1]
    while len(toks) <= steps:
        pos = [len(toks) - 1]
        x = w["emb"][toks[-1:]]
        for layer in range(L):
            xb = rmsnorm(x, w["rms_att"][layer])
            q = rope_interleaved(xb @ w["wq"][layer].T, pos, nh, hs)
            keys[layer] = np.concatenate([keys[layer], rope_interleaved(xb @ w["wk"][layer].T, pos, nkv, hs)])
            values[layer] = np.concatenate([values[layer], xb @ w["wv"][layer].T])
            allowed = np.ones((1, len(toks)), dtype=bool)
            att = attention(q, keys[layer], values[layer], nh, nkv, hs, allowed)
            x = x + att @ w["wo"][layer].T
            xb = rmsnorm(x, w["rms_ffn"][layer])
            x = x + (silu(xb @ w["w1"][layer].T) * (xb @ w["w3"][layer].T)) @ w["w2"][layer].T
        nxt = int(np.argmax(logits_of(w, x)[0]))
        if nxt == 1:  # run.c stops at BOS
            break
        toks.append(nxt)
    return toks[1:]


# --- PTP from the paper and docs/ptp.md --------------------------------------

def splitmix64_u(seed, t):
    """u_t: output t+1 of Vigna's splitmix64.c seeded with `seed`, top 53 bits."""
    z = (seed + (t + 1) * 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return (z >> 11) * 2.0 ** -53


def warp(logits, temperature, top_k=0, top_p=1.0):
    """docs/ptp.md "Sampling rule" in plain loops (double)."""
    v = len(logits)
    if temperature <= 0:
        best = 0
        for j in range(v):
            if logits[j] > logits[best]:
                best = j
        p = [0.0] * v
        p[best] = 1.0
        return p
    mx = max(logits)
    e = [float(np.exp((x - mx) / temperature)) for x in logits]
    total = sum(e)
    p = [x / total for x in e]
    order = sorted(range(v), key=lambda j: (-p[j], j))
    keep = order
    if 0 < top_k < v:
        keep = keep[:top_k]
    if top_p < 1.0:
        kept_mass = sum(p[j] for j in keep)
        cut, mass = [], 0.0
        for j in keep:
            if mass >= top_p * kept_mass:  # renormalised over the top-k set
                break
            cut.append(j)
            mass += p[j]
        keep = cut
    kept = set(keep)
    z = sum(p[j] for j in keep)
    return [p[j] / z if j in kept else 0.0 for j in range(v)]


def pick(p, u):
    """The paper's Eq. 2: the smallest j with F_j = P_0 + ... + P_j > u."""
    f = 0.0
    for j, pj in enumerate(p):
        f += pj
        if f > u:
            return j
    return max(j for j, pj in enumerate(p) if pj > 0)


def ptp_lora(head_dir, w):
    """Per layer: target -> (A, B, scale). B rows of q/k come in rotate_half
    order (docs/ptp.md: "re-ordered to interleaved RoPE pairs for llama2.c
    bases"): row i of a head goes to 2i, row i + hs/2 to 2i + 1."""
    with open(os.path.join(head_dir, "head.json")) as f:
        spec = json.load(f)["ptp"]
    t = read_safetensors(os.path.join(head_dir, "head.safetensors"))
    hs = w["head_size"]
    to_interleaved = np.empty(hs, dtype=int)
    to_interleaved[0::2] = np.arange(hs // 2)
    to_interleaved[1::2] = np.arange(hs // 2) + hs // 2
    names = {"self_attn.q_proj": "q", "self_attn.k_proj": "k", "self_attn.v_proj": "v",
             "self_attn.o_proj": "o", "mlp.gate_proj": "gate", "mlp.up_proj": "up",
             "mlp.down_proj": "down"}
    lora = []
    for layer in range(w["n_layers"]):
        d = {}
        for target in spec["lora_targets"]:
            a = t[f"layers.{layer}.{target}.lora_A"]
            b = t[f"layers.{layer}.{target}.lora_B"]
            if names[target] in ("q", "k"):
                heads = b.shape[0] // hs
                perm = np.concatenate([h * hs + to_interleaved for h in range(heads)])
                b = b[perm]
            d[names[target]] = (a, b, spec["lora_scale"])
        lora.append(d)
    return spec, t["u_embed.weight"], lora


def u_embed(e, u):
    u = float(np.float32(u))
    w0, w1, w2 = max(0.0, 1 - 2 * u), 1 - abs(2 * u - 1), max(0.0, 2 * u - 1)
    return w0 * e[0] + w1 * e[1] + w2 * e[2]


class PtpReference:
    def __init__(self, w, head_dir):
        self.w = w
        self.spec, self.e, self.lora = ptp_lora(head_dir, w)
        self.n_aux = self.spec["n_aux"]

    def call(self, committed, pending, aux_u):
        """One call, layout "last": token rows x_0..x_{n-1} then the pending
        proposals (base weights), then N auxiliary rows (u_embed input, LoRA)
        at the next positions; plain causal attention over the whole row
        sequence is exactly docs/ptp.md's mask for one group. Returns the
        teacher logits of the verify rows and the auxiliary rows' logits."""
        tokens = list(committed) + list(pending)
        x = np.concatenate([self.w["emb"][tokens], np.stack([u_embed(self.e, u) for u in aux_u])])
        rows = np.arange(len(tokens), len(tokens) + len(aux_u))
        h = llama_layers(self.w, x, np.arange(len(x)), self.lora, rows)
        lg = logits_of(self.w, h)
        n = len(committed)
        return lg[n - 1:len(tokens)], lg[len(tokens):], x[len(tokens):]

    def generate(self, prompt, steps, seed, temperature, top_k=0, top_p=1.0, trace=None):
        """Algorithm 1 of the paper with docs/ptp.md's call layout."""
        committed, pending, per_call = list(prompt), [], []
        while len(committed) - len(prompt) < steps:
            n, m = len(committed), len(pending)
            t0 = n - len(prompt)  # generated index of the first verify target
            aux_u = [splitmix64_u(seed, t0 + m + j) for j in range(self.n_aux)]
            teacher_lg, aux_lg, aux_in = self.call(committed, pending, aux_u)
            proposals = [int(np.argmax(r)) for r in aux_lg]  # Eq. 5
            teacher = [pick(warp(list(teacher_lg[i]), temperature, top_k, top_p), splitmix64_u(seed, t0 + i))
                       for i in range(m + 1)]
            a = 0
            while a < m and teacher[a] == pending[a]:
                a += 1
            new = pending[:a] + [teacher[a]]
            if trace is not None:
                trace.append({"verify_tokens": [committed[-1]] + pending, "aux_u": aux_u,
                              "proposals": proposals, "teacher_tokens": teacher, "accepted": a,
                              "committed_tokens": new, "teacher_logits": teacher_lg,
                              "aux_logits": aux_lg, "aux_input_embeds": aux_in})
            committed += new
            per_call.append(len(new))
            pending = proposals[1:] if a == m and proposals[0] == teacher[a] else []
        return committed[len(prompt):len(prompt) + steps], per_call


def plain_generate(w, prompt, steps, seed, temperature, top_k=0, top_p=1.0):
    """token_t = Pick(warp(teacher logits), u_t): one model call per token."""
    toks = list(prompt)
    for t in range(steps):
        lg = logits_of(w, llama_layers(w, w["emb"][toks], np.arange(len(toks)))[-1:])[0]
        toks.append(pick(warp(list(lg), temperature, top_k, top_p), splitmix64_u(seed, t)))
    return toks[len(prompt):]


def max_rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(1.0, np.abs(b).max()))


_W = {}


def stories():
    need(STORIES_BIN)
    if "w" not in _W:
        _W["w"] = read_llama2c(STORIES_BIN)
    return _W["w"]


class HandWorkedTest(unittest.TestCase):
    def test_pick_is_the_papers_eq2(self):
        # P = (0.1, 0, 0.6, 0.3): F = (0.1, 0.1, 0.7, 1.0); the smallest j
        # with F_j > u, so u = 0.1 falls to token 2 and token 1 (P = 0) never.
        p = [0.1, 0.0, 0.6, 0.3]
        for u, want in [(0.0, 0), (0.0999, 0), (0.1, 2), (0.6999, 2), (0.7, 3), (0.9999, 3)]:
            self.assertEqual(pick(p, u), want, u)

    def test_splitmix64_published_values(self):
        # splitmix64.c (Vigna) seeded with 1234567 (docs/ptp.md) and with 0
        # (0xE220A8397B1DCDAF is splitmix64's well-known first output).
        self.assertEqual(splitmix64_u(1234567, 0), (6457827717110365317 >> 11) * 2.0 ** -53)
        self.assertEqual(splitmix64_u(1234567, 2), (9817491932198370423 >> 11) * 2.0 ** -53)
        self.assertEqual(splitmix64_u(0, 0), (0xE220A8397B1DCDAF >> 11) * 2.0 ** -53)

    def test_algorithm1_on_the_worked_example(self):
        # docs/ptp.md "Worked example", call 2: pending [7, 88]; the teacher
        # picks 7 then 51: accept 7, emit the teacher's 51, drop the rest.
        teacher, pending = [7, 51, 99], [7, 88]
        a = 0
        while a < len(pending) and teacher[a] == pending[a]:
            a += 1
        self.assertEqual(pending[:a] + [teacher[a]], [7, 51])

    def test_warp_rules_by_hand(self):
        p = warp(list(np.log([0.1, 0.4, 0.2, 0.3])), 1.0, top_k=2)
        np.testing.assert_allclose(p, [0, 4 / 7, 0, 3 / 7])
        p = warp(list(np.log([0.1, 0.4, 0.2, 0.3])), 1.0, top_p=0.5)  # 0.4 < 0.5: keep 0.3 too
        np.testing.assert_allclose(p, [0, 4 / 7, 0, 3 / 7])
        self.assertEqual(warp([1.0, 3.0, 3.0], 0.0), [0.0, 1.0, 0.0])  # lowest index of the max


class BaseModelTest(unittest.TestCase):
    def test_numpy_model_reproduces_run_c(self):
        """Anchors this file's model to llama2.c itself."""
        need(TOKENIZER_BIN, RUN_C_TEXT)
        with open(RUN_C_TEXT, encoding="utf-8") as f:
            want = f.read()
        got = llama2c_decode(greedy_from_bos(stories(), 256)) + "\n"
        self.assertEqual(got, want)


class PtpGoldenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need(PTP_GOLDEN, PTP_HEAD)
        with open(PTP_GOLDEN) as f:
            cls.golden = json.load(f)
        cls.ref = PtpReference(stories(), PTP_HEAD)

    def test_u_values(self):
        g = self.golden
        self.assertEqual([splitmix64_u(g["seed"], t) for t in range(16)], g["u_first_16"])
        self.assertEqual(splitmix64_u(0, 0), g["u_check"]["t0"])
        self.assertEqual(splitmix64_u(1234567, 0), g["u_check"]["seed_1234567_t0"])

    def test_traced_calls(self):
        g = self.golden
        for name, tr in g["traces"].items():
            calls = []
            self.ref.generate(g["prompt"], 48, g["seed"], tr["temperature"], tr["top_k"], tr["top_p"],
                              trace=calls)
            self.assertGreaterEqual(len(calls), len(tr["calls"]), name)
            self.assertGreater(len(tr["calls"]), 0, name)
            for want, got in zip(tr["calls"], calls[:len(tr["calls"])]):
                where = f"{name} call {want['call']}"
                for key in ("verify_tokens", "aux_u", "proposals", "teacher_tokens", "accepted",
                            "committed_tokens"):
                    self.assertEqual(got[key], want[key], f"{where} {key}")
                for key in ("teacher_logits", "aux_logits", "aux_input_embeds"):
                    if key in want:
                        self.assertLess(max_rel(got[key], want[key]), 1e-4, f"{where} {key}")
            self.assertIn("teacher_logits", tr["calls"][0], f"{name}: the first call has its logits")

    def test_sequences_and_call_counts(self):
        g = self.golden
        self.assertEqual(set(g["sequences"]), {"greedy", "t1", "t08_k40_p09"})
        for name, s in g["sequences"].items():
            args = (s["temperature"], s["top_k"], s["top_p"])
            tokens, per_call = self.ref.generate(g["prompt"], s["steps"], g["seed"], *args)
            self.assertEqual(tokens, s["tokens"], name)
            self.assertEqual(len(per_call), s["calls"], name)
            self.assertEqual(per_call, s["tokens_per_call"], name)
            # Lossless: the same tokens as plain decoding at the same u.
            self.assertEqual(plain_generate(stories(), g["prompt"], s["steps"], g["seed"], *args),
                             s["tokens"], name)


# --- PIPO from docs/pipo.md ---------------------------------------------------

class PipoReference:
    def __init__(self, head_dir):
        with open(os.path.join(head_dir, "head.json")) as f:
            j = json.load(f)
        self.pad = j["pipo"]["pad_id"]
        self.eps = j["base"]["norm_eps"]
        self.theta = j["base"]["rope_theta"]
        self.t = read_safetensors(os.path.join(head_dir, "head.safetensors"))
        self.bb = read_llama2c(os.path.join(head_dir, j["pipo"]["backbone"]["file"]))

    def compress(self, a, b):
        t, e = self.t, self.bb["emb"]
        x = np.concatenate([e[a], e[b]], axis=-1)
        h = silu(x @ t["compressor.fc1.weight"].T + t["compressor.fc1.bias"])
        return h @ t["compressor.fc2.weight"].T + t["compressor.fc2.bias"]

    def backbone(self, stream):
        """h_b of every pair: the backbone's layers over z at pair positions."""
        s = np.asarray(stream)
        z = self.compress(s[0::2], s[1::2])
        return z, llama_layers(self.bb, z, np.arange(len(z)))

    def logits(self, h):
        lg = logits_of(self.bb, h)
        lg[..., self.pad] = -np.inf
        return lg

    def mtp(self, token1, hb):
        """h_d of every pair: mtp.layers.0 (a Llama layer, rotate_half RoPE)
        over m^k = fc(concat(norm_e(E[token1_k]), norm_h(h_b^k)))."""
        t, eps, bb = self.t, self.eps, self.bb
        m = np.concatenate([rmsnorm(bb["emb"][token1], t["mtp.norm_e.weight"], eps),
                            rmsnorm(hb, t["mtp.norm_h.weight"], eps)], axis=-1) @ t["mtp.fc.weight"].T
        p = "mtp.layers.0."
        nh, nkv, hs = bb["n_heads"], bb["n_kv"], bb["head_size"]
        pos = np.arange(len(m))
        xb = rmsnorm(m, t[p + "input_layernorm.weight"], eps)
        q = rope_half(xb @ t[p + "self_attn.q_proj.weight"].T, pos, nh, hs, self.theta)
        k = rope_half(xb @ t[p + "self_attn.k_proj.weight"].T, pos, nkv, hs, self.theta)
        v = xb @ t[p + "self_attn.v_proj.weight"].T
        allowed = np.tril(np.ones((len(m), len(m)), dtype=bool))
        x = m + attention(q, k, v, nh, nkv, hs, allowed) @ t[p + "self_attn.o_proj.weight"].T
        xb = rmsnorm(x, t[p + "post_attention_layernorm.weight"], eps)
        h = silu(xb @ t[p + "mlp.gate_proj.weight"].T) * (xb @ t[p + "mlp.up_proj.weight"].T)
        return x + h @ t[p + "mlp.down_proj.weight"].T

    def confidence(self, hb, hd):
        t = self.t
        x = rmsnorm(np.concatenate([hb, hd]), t["confidence.norm.weight"], self.eps)
        y = t["confidence.fc2.weight"] @ silu(t["confidence.fc1.weight"] @ x)
        return float(1.0 / (1.0 + np.exp(-y[0])))

    def generate(self, prompt, max_tokens, tau, steps_out=None):
        """Greedy, no cache: every step recomputes the whole pair stream."""
        stream = list(prompt) + ([self.pad] if len(prompt) % 2 else [])
        out, self.steps, self.accepted = [], 0, 0
        while len(out) < max_tokens:
            self.steps += 1
            _, hb = self.backbone(stream)
            i = len(hb) - 1
            l1 = self.logits(hb[i])
            t1 = int(np.argmax(l1))
            token1 = [stream[2 * k + 2] for k in range(i)] + [t1]
            hd = self.mtp(token1, hb)
            l2 = self._l2(hd[i])
            t2 = int(np.argmax(l2))
            c = self.confidence(hb[i], hd[i])
            accept = np.float32(c) >= np.float32(tau)
            if steps_out is not None:
                steps_out.append({"pair_position": i, "t1": t1, "t2": t2, "conf": c, "accepted": bool(accept),
                                  "logits1_max": float(l1.max()), "logits2_max": float(l2.max())})
            self.accepted += int(accept)
            out += [t1] + ([t2] if accept else [])
            stream += [t1, t2 if accept else self.pad]
        return out[:max_tokens], stream

    def _l2(self, hd):
        lg = rmsnorm(hd, self.t["mtp.norm.weight"], self.eps) @ self.bb["wcls"].T
        lg[self.pad] = -np.inf
        return lg


class PipoGoldenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        need(PIPO_GOLDEN, PIPO_HEAD, STORIES_BIN)
        with open(PIPO_GOLDEN) as f:
            cls.golden = json.load(f)
        cls.ref = PipoReference(PIPO_HEAD)

    def test_prompt_compressor_and_backbone(self):
        g, ref = self.golden, self.ref
        self.assertEqual(g["padded_prompt"], g["prompt"] + [ref.pad])
        z, hb = ref.backbone(g["padded_prompt"])
        for key, k in (("compressor_first_pair", 0), ("compressor_last_prompt_pair", len(z) - 1)):
            want = g[key]
            self.assertEqual(want["tokens"], g["padded_prompt"][2 * k:2 * k + 2])
            self.assertLess(max_rel(z[k][:8], want["first8"]), 1e-4, key)
            self.assertLess(max_rel(np.linalg.norm(z[k]), want["norm"]), 1e-4, key)
        want = g["h_b_last_prompt_pair"]
        self.assertEqual(want["pair_position"], len(hb) - 1)
        self.assertLess(max_rel(hb[-1][:8], want["first8"]), 1e-4)
        self.assertLess(max_rel(np.linalg.norm(hb[-1]), want["norm"]), 1e-4)
        l1 = ref.logits(hb[-1])
        top = list(np.argsort(-l1, kind="stable")[:5])
        self.assertEqual(top, want["logits1_top5"]["ids"])
        self.assertLess(max_rel(l1[top], want["logits1_top5"]["values"]), 1e-4)

    def test_first_steps(self):
        g = self.golden
        want = g["first_steps_tau_0.95"]
        steps = []
        self.ref.generate(g["prompt"], 2 * len(want), 0.95, steps)
        self.assertGreaterEqual(len(steps), len(want))
        for w, s in zip(want, steps[:len(want)]):
            for key in ("pair_position", "t1", "t2", "accepted"):
                self.assertEqual(s[key], w[key], f"step {w['step']} {key}")
            for key in ("conf", "logits1_max", "logits2_max"):
                self.assertLess(max_rel(s[key], w[key]), 1e-4, f"step {w['step']} {key}")

    def test_greedy_outputs(self):
        g = self.golden
        self.assertGreaterEqual(len(g["greedy"]), 3)
        for name, run in g["greedy"].items():
            tokens, stream = self.ref.generate(run["prompt"], run["max_tokens"], run["tau"])
            self.assertEqual(tokens, run["tokens"], name)
            self.assertEqual(stream, run["stream"], name)
            self.assertEqual((self.ref.steps, self.ref.accepted), (run["steps"], run["accepted"]), name)


if __name__ == "__main__":
    unittest.main()
