"""PTP (specline_train/ptp.py, train_ptp.py): the coupled-sampling
reference is lossless (ptp_generate == plain_generate token for token, with
untrained and random adapters, greedy / T=1 / top-k+top-p, both call
layouts, several seeds); verify() edge cases; warp / inverse_cdf rules; the
u generator (SplitMix64 reference values); gated LoRA leaves the verify rows
on base weights; the training layout equals the inference call; export /
load round trip; a seconds-long training run lowers the loss; the golden
file (tests/data/ptp_golden.json) equals a fresh computation."""
import json
import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "training"))
import train_ptp  # noqa: E402
from specline_train.model import load_model  # noqa: E402
from specline_train.ptp import (PtpModel, export_ptp, inverse_cdf, load_ptp, plain_generate,  # noqa: E402
                                ptp_generate, splitmix64, u_value, u_values, verify, warp)

STORIES_BIN = os.path.join(REPO, "..", "shared", "models", "stories260K", "stories260K.bin")
HEAD = os.path.join(REPO, "training", "heads", "stories260K", "ptp")
GOLDEN = os.path.join(HERE, "data", "ptp_golden.json")

torch.set_num_threads(1)
_BASE = None


def base():
    global _BASE
    if _BASE is None:
        _BASE = load_model(STORIES_BIN)
    return _BASE


def random_adapter(n_aux=4, rank=4, seed=0, scale=0.2):
    m = PtpModel(base(), n_aux, rank, seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.trainable():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return m.eval()


def logits_for(probs):
    return torch.log(torch.tensor(probs, dtype=torch.float64))


class SamplingRulesTest(unittest.TestCase):
    def test_splitmix64_reference_values(self):
        # Vigna's splitmix64.c seeded with 1234567: the first three outputs
        want = [6457827717110365317, 3203168211198807973, 9817491932198370423]
        got = [splitmix64((1234567 + i * 0x9E3779B97F4A7C15) % (1 << 64)) for i in range(3)]
        self.assertEqual(got, want)
        self.assertEqual(u_value(1234567, 0), (want[0] >> 11) / 2.0 ** 53)
        us = u_values(5, 0, 1000)
        self.assertTrue(all(0.0 <= u < 1.0 for u in us))
        self.assertAlmostEqual(sum(us) / len(us), 0.5, delta=0.03)
        self.assertEqual(us[10:20], u_values(5, 10, 10))  # indexed, not sequential state

    def test_inverse_cdf_vocabulary_order(self):
        p = torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64)
        self.assertEqual(inverse_cdf(p, 0.0), 0)
        self.assertEqual(inverse_cdf(p, 0.0999), 0)
        self.assertEqual(inverse_cdf(p, 0.1), 2)  # F_j > u strictly; the zero-probability token never
        self.assertEqual(inverse_cdf(p, 0.6999), 2)
        self.assertEqual(inverse_cdf(p, 0.7), 3)
        self.assertEqual(inverse_cdf(p, 0.999999), 3)
        self.assertEqual(inverse_cdf(torch.tensor([0.5, 0.5 - 1e-12, 0.0], dtype=torch.float64), 1 - 1e-13), 1)

    def test_warp(self):
        lg = logits_for([0.1, 0.4, 0.2, 0.3])
        g = warp(lg, 0.0)
        self.assertEqual(g.tolist(), [0.0, 1.0, 0.0, 0.0])
        self.assertEqual(warp(torch.tensor([1.0, 3.0, 3.0]), 0.0).tolist(), [0.0, 1.0, 0.0])  # first max
        self.assertTrue(torch.allclose(warp(lg, 1.0), torch.tensor([0.1, 0.4, 0.2, 0.3], dtype=torch.float64)))
        k2 = warp(lg, 1.0, top_k=2)
        self.assertTrue(torch.allclose(k2, torch.tensor([0, 4 / 7, 0, 3 / 7], dtype=torch.float64)))
        p5 = warp(lg, 1.0, top_p=0.5)  # 0.4 < 0.5: keep 0.4 and 0.3
        self.assertTrue(torch.allclose(p5, torch.tensor([0, 4 / 7, 0, 3 / 7], dtype=torch.float64)))
        p3 = warp(lg, 1.0, top_p=0.35)  # 0.4 alone reaches 0.35
        self.assertEqual(p3.tolist(), [0.0, 1.0, 0.0, 0.0])
        t2 = warp(lg, 2.0)
        w = torch.tensor([0.1, 0.4, 0.2, 0.3], dtype=torch.float64).sqrt()
        self.assertTrue(torch.allclose(t2, w / w.sum()))
        # the batch version used for training bins agrees
        b = train_ptp.warp_batch(torch.stack([lg, lg]), 0.7, 3, 0.8)
        self.assertTrue(torch.allclose(b[0], warp(lg, 0.7, 3, 0.8)))

    def test_greedy_is_argmax_limit(self):
        lg = torch.randn(50, generator=torch.Generator().manual_seed(1))
        for u in (0.0, 0.3, 0.99):
            self.assertEqual(inverse_cdf(warp(lg, 0.0), u), int(lg.argmax()))
            self.assertEqual(inverse_cdf(warp(lg, 1e-4), u), int(lg.argmax()))


class VerifyTest(unittest.TestCase):
    def setUp(self):
        # three rows over a 4-token vocabulary; CDFs in vocabulary order
        self.rows = torch.stack([logits_for([0.5, 0.5, 1e-30, 1e-30]),
                                 logits_for([0.25, 0.25, 0.25, 0.25]),
                                 logits_for([0.1, 0.2, 0.3, 0.4])])

    def test_all_accepted(self):
        u = [0.7, 0.3, 0.05]  # teacher: 1, 1, 0
        a, toks = verify(self.rows, [1, 1], u, 1.0)
        self.assertEqual((a, toks), (2, [1, 1, 0]))

    def test_none_accepted(self):
        a, toks = verify(self.rows, [0, 1], [0.7, 0.3, 0.05], 1.0)
        self.assertEqual((a, toks), (0, [1]))

    def test_partial_and_empty(self):
        a, toks = verify(self.rows, [1, 2], [0.7, 0.3, 0.05], 1.0)
        self.assertEqual((a, toks), (1, [1, 1]))
        a, toks = verify(self.rows[:1], [], [0.2], 1.0)
        self.assertEqual((a, toks), (0, [0]))

    def test_greedy(self):
        # T = 0: the teacher token is the argmax whatever u is
        rows = torch.stack([logits_for([0.1, 0.6, 0.3]), logits_for([0.5, 0.2, 0.3]), logits_for([0.2, 0.2, 0.6])])
        self.assertEqual(verify(rows, [1, 0], [0.99, 0.99, 0.0], 0.0), (2, [1, 0, 2]))
        self.assertEqual(verify(rows, [1, 2], [0.0, 0.0, 0.0], 0.0), (1, [1, 0]))

    def test_needs_rows(self):
        with self.assertRaises(ValueError):
            verify(self.rows[:2], [1, 1], [0.1, 0.2, 0.3])


class LosslessTest(unittest.TestCase):
    SETTINGS = [(0.0, 0, 1.0), (1.0, 0, 1.0), (0.8, 40, 0.9)]

    def check(self, model, seeds, steps=24, layouts=("last", "all"), prompt=(1,)):
        for T, k, p in self.SETTINGS:
            for seed in seeds:
                ref = plain_generate(base(), list(prompt), steps, T, k, p, seed=seed)
                for lay in layouts:
                    st = {}
                    got = ptp_generate(model, list(prompt), steps, T, k, p, seed=seed, layout=lay, stats=st)
                    self.assertEqual(got, ref, f"T={T} k={k} p={p} seed={seed} layout={lay}")
                    self.assertEqual(sum(st["per_call"]), steps)

    def test_untrained_adapter(self):
        self.check(PtpModel(base(), 4, 4).eval(), seeds=[0, 1])

    def test_random_adapter(self):
        self.check(random_adapter(n_aux=3, seed=2), seeds=[3, 4], prompt=(1, 403, 261))

    def test_trained_adapter_accepts_more_than_one(self):
        if not os.path.isdir(HEAD):
            self.skipTest("no trained adapter")
        m = load_ptp(HEAD, base())
        st = {}
        got = ptp_generate(m, [1], 48, 0.0, seed=0, stats=st)
        self.assertEqual(got, plain_generate(base(), [1], 48, 0.0, seed=0))
        self.assertLess(st["calls"], 48)  # a trained adapter gets proposals accepted

    def test_teacher_rows_are_base(self):
        m = random_adapter(n_aux=4, seed=5)
        prefix, ver = [1, 403, 261, 30], [75, 100, 7]
        r = m.forward_call(prefix, ver, [0.1, 0.5, 0.9, 0.33])
        lg, _ = base()(torch.tensor([prefix + ver]))
        self.assertLess(float((r["teacher_logits"] - lg[0, len(prefix):]).abs().max()), 1e-4)
        r0 = PtpModel(base(), 4, 4).eval().forward_call(prefix, ver, [0.1, 0.5, 0.9, 0.33])
        self.assertFalse(torch.allclose(r["aux_logits"], r0["aux_logits"]))  # LoRA does act on aux rows
        # an auxiliary row sees only earlier auxiliary rows: the first N-1 are unchanged by a later u
        r2 = m.forward_call(prefix, ver, [0.1, 0.5, 0.9, 0.77])
        self.assertTrue(torch.allclose(r["aux_logits"][:3], r2["aux_logits"][:3], atol=1e-5))
        self.assertFalse(torch.allclose(r["aux_logits"][3], r2["aux_logits"][3], atol=1e-5))


class TrainingLayoutTest(unittest.TestCase):
    def test_training_rows_equal_forward_call(self):
        m = random_adapter(n_aux=3, seed=7)
        g = torch.Generator().manual_seed(0)
        toks = torch.randint(3, 500, (2, 20), generator=g)
        toks[:, 0] = 1
        splits = torch.tensor([[1, 9, 17], [4, 5, 12]])
        u = torch.rand(2, 3, 3, generator=g)
        with torch.no_grad():
            kvs, teacher = m.base_prefix(toks)
            lg = m.aux_logits_train(kvs, splits, u)
        for b in range(2):
            for gi in range(3):
                s = int(splits[b, gi])
                r = m.forward_call(toks[b, :s - 1].tolist(), [int(toks[b, s - 1])], u[b, gi].tolist())
                self.assertLess(float((r["aux_logits"] - lg[b, gi]).abs().max()), 1e-4)

    def test_bins_pick_the_target(self):
        g = torch.Generator().manual_seed(1)
        logits = torch.randn(2, 6, 9, generator=g)
        probs = train_ptp.warp_batch(logits, 1.0)
        toks = torch.randint(0, 9, (2, 6), generator=g)
        u = train_ptp.bin_u(probs, toks, g)
        for b in range(2):
            for k in range(1, 6):
                self.assertEqual(inverse_cdf(probs[b, k - 1], float(u[b, k])), int(toks[b, k]))

    def test_short_training_lowers_loss(self):
        r = train_ptp.train(STORIES_BIN, None, steps=25, n_aux=4, lora_rank=4, batch=4, groups=4, lr=3e-3,
                            n_train=16, n_eval=4, length=32, eval_prompts=1, eval_gen_tokens=8, quiet=True,
                            threads=1)
        c = r["curve"]
        self.assertLess(sum(c[-5:]) / 5, sum(c[:3]) / 3 - 0.5)
        self.assertLess(r["after"]["ce"], r["before"]["ce"])


class ExportTest(unittest.TestCase):
    def test_round_trip(self):
        m = random_adapter(n_aux=3, rank=2, seed=11)
        with tempfile.TemporaryDirectory() as d:
            export_ptp(m, d, {"note": "test"})
            with open(os.path.join(d, "head.json")) as f:
                j = json.load(f)
            self.assertEqual(j["method"], "ptp")
            self.assertEqual(j["ptp"]["n_aux"], 3)
            self.assertEqual(j["ptp"]["lora_rank"], 2)
            self.assertEqual(j["tensors"]["u_embed.weight"], [3, 64])
            self.assertEqual(j["tensors"]["layers.4.self_attn.k_proj.lora_B"], [32, 2])
            self.assertEqual(j["tensors"]["layers.0.mlp.down_proj.lora_A"], [2, 172])
            self.assertEqual(len(j["tensors"]), 1 + 5 * 7 * 2)
            m2 = load_ptp(d, base())
            for n, t in m.adapter_tensors().items():
                self.assertTrue(torch.equal(t, m2.adapter_tensors()[n]), n)
            self.assertEqual(m2.lora_scale, m.lora_scale)
            a = m.forward_call([1, 5], [6], [0.2, 0.4, 0.6])
            b = m2.forward_call([1, 5], [6], [0.2, 0.4, 0.6])
            self.assertTrue(torch.equal(a["aux_logits"], b["aux_logits"]))
            # a base with another shape is refused
            other = load_model(STORIES_BIN)
            other.cfg.rope_theta = 500000.0
            with self.assertRaises(ValueError):
                load_ptp(d, other)


class GoldenTest(unittest.TestCase):
    def test_golden_matches_fresh_computation(self):
        if not os.path.exists(GOLDEN) or not os.path.isdir(HEAD):
            self.skipTest("no golden file or adapter")
        sys.path.insert(0, os.path.join(REPO, "training"))
        import ptp_golden
        with open(GOLDEN) as f:
            want = json.load(f)
        self.assertLess(os.path.getsize(GOLDEN), 200_000)
        got = ptp_golden.build()
        # Same sets of sequences and traces, and per trace the same number of
        # calls: zip() below would silently stop at the shorter list.
        self.assertEqual(set(got["sequences"]), set(want["sequences"]))
        self.assertEqual(set(got["traces"]), set(want["traces"]))
        for name, s in want["sequences"].items():
            self.assertEqual(got["sequences"][name]["tokens"], s["tokens"], name)
            self.assertEqual(got["sequences"][name]["calls"], s["calls"], name)
            ref = plain_generate(base(), want["prompt"], s["steps"], s["temperature"], s["top_k"], s["top_p"],
                                 seed=want["seed"])
            self.assertEqual(ref, s["tokens"], name)
        self.assertEqual(got["u_first_16"], want["u_first_16"])
        for name, tr in want["traces"].items():
            self.assertGreater(len(tr["calls"]), 0, name)
            self.assertEqual(len(got["traces"][name]["calls"]), len(tr["calls"]), name)
            for c_want, c_got in zip(tr["calls"], got["traces"][name]["calls"]):
                self.assertEqual(set(c_got), set(c_want), f"{name} call {c_want['call']}: fields")
                for key in ("verify_tokens", "aux_u", "proposals", "teacher_tokens", "accepted",
                            "committed_tokens"):
                    self.assertEqual(c_got[key], c_want[key], f"{name} call {c_want['call']} {key}")
                for key in ("teacher_logits", "aux_logits", "aux_input_embeds"):
                    if key in c_want:
                        self.assertEqual(torch.tensor(c_got[key]).shape, torch.tensor(c_want[key]).shape, key)
                        d = (torch.tensor(c_got[key]) - torch.tensor(c_want[key])).abs().max()
                        self.assertLess(float(d), 1e-4, key)
            self.assertIn("teacher_logits", tr["calls"][0], f"{name}: the first call's logits")


if __name__ == "__main__":
    unittest.main()
