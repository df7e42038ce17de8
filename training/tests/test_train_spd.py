"""SPD speculation module: the PyTorch forward equals the C++ module's float64
golden (tests/data/spd_module/golden.json, the same logits
tests/spd_module_test.cc checks), the training layout (simulated pipeline
fill, g^0 block as queries) equals the inference forward under the true
depth schedule, and a tiny end-to-end training run (seconds) lowers the loss
and exports a module that loads in Python and in C++ (`specline info
--head`, when built)."""
import json
import os
import shutil
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "training"))
sys.path.insert(0, HERE)
import train_spd  # noqa: E402
from test_heads import cxx_info_head  # noqa: E402
from specline_train.heads import load_head  # noqa: E402
from specline_train.model import load_model  # noqa: E402
from specline_train.spd import SpdModule  # noqa: E402

STORIES_BIN = os.path.join(REPO, "..", "shared", "models", "stories260K", "stories260K.bin")
GOLDEN = os.path.join(REPO, "tests", "data", "spd_module")


class FillDrawTest(unittest.TestCase):
    def test_full_fill_is_drawn_per_sequence_or_per_batch(self):
        n, batch = 4, 8
        for per in ("sequence", "batch"):
            g = torch.Generator().manual_seed(3)
            draws = [train_spd.sample_active(n, batch, 0.5, g, per) for _ in range(400)]
            flat = torch.stack(draws)
            self.assertTrue(bool(((flat >= 1) & (flat <= n)).all()))
            self.assertAlmostEqual((flat == n).float().mean().item(), 0.5, delta=0.06)  # P(a = n) = full_prob
            whole = [bool((d == n).all()) or bool((d < n).all()) for d in draws]
            if per == "batch":
                self.assertTrue(all(whole))  # a batch is full or partial as a whole
            else:
                self.assertLess(sum(whole) / len(whole), 0.1)
            partial = flat[flat < n]
            self.assertEqual(set(partial.tolist()), set(range(1, n)))


class GoldenTest(unittest.TestCase):
    def test_forward_matches_cxx_golden(self):
        path = os.path.join(GOLDEN, "golden.json")
        if not os.path.exists(path):
            self.skipTest("tests/data/spd_module is absent")
        with open(path) as f:
            g = json.load(f)
        for name, h in g["heads"].items():
            with self.subTest(head=name):
                b = g["bases"][h["base"]]
                base = load_model(os.path.join(GOLDEN, b["dir"]))
                m = SpdModule.from_dir(os.path.join(GOLDEN, h["dir"]), base)
                self.assertEqual(m.taps, h["taps"])
                self.assertEqual([sorted(set(idx)) for _, idx in m.plans], h["taps_for_depth"])
                self.assertEqual(m.all_taps(), h["all_taps"])
                H = [torch.tensor(x)[None] for x in b["hidden"]]
                toks = torch.tensor([b["tokens"]])
                cur = []
                for c in h["calls"]:
                    first = c["rows"][0]["pos"]
                    cur = cur[:first] + [r["depth"] for r in c["rows"]]
                    T = len(cur)
                    with torch.no_grad():
                        got = m.forward_rows(toks[:, :T], [x[:, :T] for x in H], torch.tensor(cur))[0, -1]
                    want = torch.tensor(c["last_logits"], dtype=torch.float32)
                    scale = want.abs().max().item()
                    self.assertLess((got - want).abs().max().item(), 1e-4 * max(1.0, scale),
                                    f"{name} call at {first} depths {cur}")


@unittest.skipUnless(os.path.exists(STORIES_BIN), "../shared/models/stories260K is absent")
class StoriesSpdTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = load_model(STORIES_BIN)

    def test_fill_layout_equals_inference_schedule(self):
        # forward_fill (all queries at once, appendix A layout) == a plain
        # causal forward whose last row is t at depth 0, rows t-a+1..t at
        # depths a-1..0 and earlier rows at n, for every t and a.
        toks = torch.randint(0, 512, (3, 11), generator=torch.Generator().manual_seed(1))
        torch.manual_seed(0)
        with torch.no_grad():
            _, H = self.base(toks)
            for n, ls, layout in ((5, 1, "v11"), (2, 2, "v11"), (3, 2, "v10")):
                m = SpdModule.from_base(self.base, n, ls, layout, init_layers="random")
                for p in m.parameters():
                    p.add_(0.05 * torch.randn_like(p))
                act = torch.tensor([n, 1, max(1, n - 1)])
                fill = m.forward_fill(toks, H, act)
                for b in range(3):
                    a = act[b].item()
                    for t in range(toks.shape[1]):
                        d = torch.tensor([t - T if t - T < a else n for T in range(t + 1)])
                        r = m.forward_rows(toks[b:b + 1, :t + 1], [h[b:b + 1, :t + 1] for h in H], d)
                        torch.testing.assert_close(fill[b, t], r[0, -1], rtol=1e-4, atol=1e-4,
                                                   msg=f"n={n} L_s={ls} {layout} a={a} t={t}")

    def test_init(self):
        m = SpdModule.from_base(self.base, 5, 1)
        self.assertEqual(m.taps, [0, 1, 3, 4])
        torch.testing.assert_close(m.lm_head.weight, self.base.lm_head.weight)
        torch.testing.assert_close(m.layers[0].mlp.up_proj.weight, self.base.model.layers[4].mlp.up_proj.weight)
        self.assertEqual(set(m.state_dict()), {n for n in m.state_dict() if not n.startswith("base_")})
        m2 = SpdModule.from_base(self.base, 2, 2)
        self.assertEqual(m2.taps, [0, 2, 4])
        torch.testing.assert_close(m2.layers[0].self_attn.q_proj.weight,
                                   self.base.model.layers[3].self_attn.q_proj.weight)

    def test_tiny_run(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        for n, ls, layout in ((5, 1, "v11"), (2, 2, "v10")):
            with self.subTest(n=n, ls=ls, layout=layout):
                out = os.path.join(d, f"spd-{n}-{ls}-{layout}")
                r = train_spd.train(STORIES_BIN, n, ls, out, layout=layout, steps=30, batch=8, lr=3e-3,
                                    n_train=32, n_eval=8, length=32, seed=5, log_every=1000, quiet=True)
                first, last = sum(r["curve"][:5]) / 5, sum(r["curve"][-5:]) / 5
                self.assertLess(last, first * 0.9, r["curve"])
                self.assertLess(r["after"]["steady"]["kl"], r["before"]["steady"]["kl"])
                j, t = load_head(out, self.base.cfg)
                self.assertEqual(j["method"], "spd")
                self.assertEqual(j["spd"]["n_stages"], n)
                self.assertEqual(j["spd"]["n_layers"], ls)
                self.assertEqual(j["spd"]["feature_layout"], layout)
                self.assertEqual(list(t["lm_head.weight"].shape), [512, 64])
                self.assertEqual(list(t[f"layers.{ls - 1}.mlp.gate_proj.weight"].shape), [172, 64])
                if layout == "v11":
                    self.assertEqual(j["spd"]["taps"], [0, 1, 3, 4])
                    self.assertEqual([list(t[f"fc.{i}.weight"].shape) for i in range(4)],
                                     [[64, 64], [64, 128], [64, 192], [64, 256]])
                else:
                    self.assertEqual(list(t["fc.0.weight"].shape), [64, 64])
                    self.assertEqual([list(t[f"fc.{k}.weight"].shape) for k in (1, 2)], [[64, 192]] * 2)
                self.assertNotIn("norm.weight", t)
                m = j["metadata"]
                self.assertEqual(m["steps"], 30)
                self.assertEqual(len(m["base_sha256"]), 64)
                self.assertIn("KL", m["recipe"])
                # the re-read module gives the trained module's logits
                back = SpdModule.from_dir(out, self.base)
                toks = torch.randint(0, 512, (1, 9), generator=torch.Generator().manual_seed(2))
                with torch.no_grad():
                    _, H = self.base(toks)
                    torch.testing.assert_close(back.forward_fill(toks, H, n),
                                               r["module"].forward_fill(toks, H, n))
                info = cxx_info_head(self, STORIES_BIN, out)
                if info is not None:
                    self.assertIn(f"method spd, n_stages {n}, layers {ls}, layout {layout}", info)


if __name__ == "__main__":
    unittest.main()
