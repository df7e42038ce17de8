"""A tiny end-to-end PPSD training run (seconds): the loss decreases, the head
beats its initialisation on held-out data, and the exported head loads in
Python (right shapes) and in C++ (`specline info --head`, when built)."""
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "training"))
sys.path.insert(0, HERE)
import train_ppsd  # noqa: E402
from specline_train.heads import load_head  # noqa: E402
from specline_train.model import load_model  # noqa: E402
from test_heads import cxx_info_head  # noqa: E402

STORIES_BIN = os.path.join(REPO, "..", "shared", "models", "stories260K", "stories260K.bin")


@unittest.skipUnless(os.path.exists(STORIES_BIN), "../shared/models/stories260K is absent")
class TinyTrainingRunTest(unittest.TestCase):
    def test_tiny_run(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        base = load_model(STORIES_BIN)
        for method, e in (("ppsd-norm", 1), ("ppsd-layer", 2)):
            with self.subTest(method=method):
                out = os.path.join(d, method)
                r = train_ppsd.train(STORIES_BIN, method, e, out, steps=40, batch=8, lr=3e-3,
                                     n_train=32, n_eval=8, length=32, seed=5, log_every=1000,
                                     quiet=True)
                first, last = sum(r["curve"][:5]) / 5, sum(r["curve"][-5:]) / 5
                self.assertLess(last, first * 0.9, r["curve"])
                self.assertLess(r["after"]["loss"], r["before"]["loss"])
                j, t = load_head(out, base.cfg)
                self.assertEqual((j["method"], j["exit_layer"]), (method, e))
                self.assertEqual(list(t["lm_head.weight"].shape), [512, 64])
                self.assertEqual(list(t["norm.weight"].shape), [64])
                if method == "ppsd-layer":
                    self.assertEqual(list(t["layers.0.mlp.gate_proj.weight"].shape), [172, 64])
                    self.assertEqual(list(t["layers.0.self_attn.k_proj.weight"].shape), [32, 64])
                m = j["metadata"]
                self.assertEqual(m["steps"], 40)
                self.assertEqual(len(m["base_sha256"]), 64)
                self.assertEqual(m["data"]["temperature"], 1.0)
                self.assertIn("KL", m["recipe"])
                info = cxx_info_head(self, STORIES_BIN, out)
                if info is not None:
                    self.assertIn(f"method {method}, exit_layer {e}", info)

    def test_teacher_recomputed_per_batch_equals_cached(self):
        # Large vocabularies recompute the teacher per batch instead of
        # holding [N, S, V] log-probs.
        import torch
        model = load_model(STORIES_BIN)
        tokens = torch.randint(0, 512, (6, 20), generator=torch.Generator().manual_seed(1))
        cached = train_ppsd.Teacher(model, tokens, 2)
        lazy = train_ppsd.Teacher(model, tokens, 2, budget=0)
        self.assertTrue(cached.cached)
        self.assertFalse(lazy.cached)
        idx = torch.tensor([4, 0, 5])
        for a, b in zip(cached.get(idx), lazy.get(idx)):
            self.assertLess((a - b).abs().max().item(), 1e-4)  # batch-size-dependent float sums

    def test_corpus_data(self):
        # A text corpus instead of self-distilled samples: the recipe's own
        # sources, windows of 32 tokens; held-out windows from the last file.
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        out = os.path.join(d, "head")
        corpus = {"patterns": [os.path.join(REPO, "training", "**", "*.py")],
                  "tokenizer": os.path.join(os.path.dirname(STORIES_BIN), "tok512.bin"),
                  "max_bytes": 400_000, "eval_files": 1}
        r = train_ppsd.train(STORIES_BIN, "ppsd-norm", 2, out, steps=40, batch=8, lr=3e-3,
                             n_train=32, n_eval=8, length=32, seed=5, log_every=1000, quiet=True,
                             corpus=corpus)
        self.assertLess(sum(r["curve"][-5:]) / 5, sum(r["curve"][:5]) / 5)
        self.assertLess(r["after"]["loss"], r["before"]["loss"])
        self.assertEqual(r["after"]["positions"], 8 * 32)  # every window position is a target
        j, _ = load_head(out, load_model(STORIES_BIN).cfg)
        data = j["metadata"]["data"]
        self.assertEqual((data["kind"], data["train_sequences"], data["eval_files"]), ("corpus", 32, 1))


if __name__ == "__main__":
    unittest.main()
