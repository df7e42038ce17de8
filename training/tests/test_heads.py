"""PPSD heads: numerics equal the C++ golden, init from the base, export format."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "training"))
from specline_train.heads import (LayerHead, export_head, export_module, head_from_dir,  # noqa: E402
                                  load_head, make_head)
from specline_train.model import LlamaConfig, load_model  # noqa: E402

STORIES_BIN = os.path.join(REPO, "..", "shared", "models", "stories260K", "stories260K.bin")
GOLDEN = os.path.join(REPO, "tests", "data", "heads")


def specline_binary():
    """The specline CLI with `info --head`: SPECLINE_BIN, else build-train/,
    build/ or build-lead/."""
    for p in (os.environ.get("SPECLINE_BIN"), *(os.path.join(REPO, d, "specline")
                                                 for d in ("build-train", "build", "build-lead"))):
        if p and os.access(p, os.X_OK):
            h = subprocess.run([p, "info", "--help"], capture_output=True, text=True)
            if "--head" in h.stdout + h.stderr:
                return p
    return None


def cxx_info_head(test, model_path, head_dir):
    """Loads the head with the C++ LoadDraftHead via `specline info --head`."""
    exe = specline_binary()
    if exe is None:
        # Recorded as a skipped subtest, so the strict runner sees it; the
        # test's Python checks go on.
        with test.subTest("C++ load check"):
            test.skipTest("no specline binary with `info --head`; build it with "
                          "cmake --build build-train --target specline")
        return None
    r = subprocess.run([exe, "info", "--model", model_path, "--head", head_dir],
                       capture_output=True, text=True)
    test.assertEqual(r.returncode, 0, r.stderr)
    return r.stdout


class GoldenTest(unittest.TestCase):
    def test_layer_head_matches_cxx_golden(self):
        # tests/heads_test.cc runs the C++ PpsdHead against the same logits.
        path = os.path.join(GOLDEN, "ppsd_layer_golden.json")
        if not os.path.exists(path):
            self.skipTest("tests/data/heads is absent")
        with open(path) as f:
            g = json.load(f)
        cfg = LlamaConfig(**g["base"])
        j, t = load_head(os.path.join(GOLDEN, g["head"]), cfg)
        head = LayerHead(cfg, j["exit_layer"])
        head.load_state_dict(t)
        with torch.no_grad():
            h = torch.tensor(g["hidden"], dtype=torch.float32)[None]
            full = head(h)[0]
            cache = {}  # incremental, as on a stage: position by position
            inc = torch.cat([head(h[:, p:p + 1], p, cache)[0] for p in range(h.shape[1])])
        want = torch.tensor(g["logits"], dtype=torch.float32)
        torch.testing.assert_close(full, want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(inc, want, rtol=1e-4, atol=1e-4)


@unittest.skipUnless(os.path.exists(STORIES_BIN), "../shared/models/stories260K is absent")
class StoriesHeadsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.base = load_model(STORIES_BIN)
        cls.toks = torch.randint(0, 512, (2, 20), generator=torch.Generator().manual_seed(3))
        with torch.no_grad():
            cls.logits, cls.hidden = cls.base(cls.toks)

    def test_norm_head_is_the_base_output_head_at_e(self):
        head = make_head("ppsd-norm", self.base, 2)
        with torch.no_grad():
            got = head(self.hidden[2])
            want = self.base.lm_head(self.base.model.norm(self.hidden[2]))
        torch.testing.assert_close(got, want)

    def test_layer_head_copied_from_last_layer_is_the_base(self):
        L = self.base.cfg.n_layers
        head = make_head("ppsd-layer", self.base, L - 1)
        with torch.no_grad():
            got = head(self.hidden[L - 1])
        torch.testing.assert_close(got, self.logits, rtol=1e-5, atol=1e-5)

    def test_export_round_trip_and_cxx_load(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        for method, e in (("ppsd-norm", 1), ("ppsd-layer", 2)):
            head = make_head(method, self.base, e)
            out = export_module(os.path.join(d, method), head, {"recipe": "test", "steps": 0})
            j, t = load_head(out, self.base.cfg)
            self.assertEqual(j["method"], method)
            self.assertEqual(j["exit_layer"], e)
            self.assertEqual(j["base"]["vocab_size"], 512)
            self.assertEqual(list(t["lm_head.weight"].shape), [512, 64])
            self.assertEqual(len(t), 2 if method == "ppsd-norm" else 11)
            back = head_from_dir(out, self.base)
            with torch.no_grad():
                torch.testing.assert_close(back(self.hidden[e]), head(self.hidden[e]))
            info = cxx_info_head(self, STORIES_BIN, out)
            if info is not None:
                self.assertIn(f"method {method}, exit_layer {e}, tensors", info)
        # F16 export is read back as F16 by safetensors
        head = make_head("ppsd-norm", self.base, 1)
        out = export_module(os.path.join(d, "f16"), head, dtype="F16")
        with open(os.path.join(out, "head.json")) as f:
            self.assertEqual(json.load(f)["dtype"], "F16")
        cxx_info_head(self, STORIES_BIN, out)

    def test_spd_export_loads_in_cxx(self):
        # SPD modules are not trained here yet; the writer already knows their layout.
        from specline_train.heads import expected_tensors, spd_default_taps, spd_v10_taps
        L = self.base.cfg.n_layers
        self.assertEqual(spd_default_taps(L, 5), [0, 1, 3, 4])
        g = torch.Generator().manual_seed(0)
        with tempfile.TemporaryDirectory() as d:
            for layout, n, taps in (("v11", 5, spd_default_taps(L, 5)), ("v10", 2, spd_v10_taps(L, 2))):
                spd = {"n_stages": n, "taps": taps, "n_layers": 1, "feature_layout": layout}
                t = {name: torch.randn(*shape, generator=g) * 0.1
                     for name, shape in expected_tensors("spd", self.base.cfg, spd=spd)}
                out = export_head(os.path.join(d, layout), "spd", None, self.base.cfg, t, spd=spd)
                j, back = load_head(out, self.base.cfg)
                self.assertEqual(set(back), set(t))
                info = cxx_info_head(self, STORIES_BIN, out)
                if info is not None:
                    self.assertIn(f"method spd, n_stages {n}, layers 1, layout {layout}", info)

    def test_export_rejects_bad_tensors(self):
        head = make_head("ppsd-norm", self.base, 1)
        sd = head.state_dict()
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(ValueError, "missing"):
                export_head(d, "ppsd-norm", 1, self.base.cfg, {"norm.weight": sd["norm.weight"]})
            with self.assertRaisesRegex(ValueError, "shape"):
                export_head(d, "ppsd-norm", 1, self.base.cfg,
                            {"norm.weight": sd["norm.weight"], "lm_head.weight": sd["lm_head.weight"][:10]})
            with self.assertRaisesRegex(ValueError, "exit_layer"):
                export_head(d, "ppsd-norm", 5, self.base.cfg, sd)
            other = LlamaConfig(**{**self.base.cfg.fingerprint(), "vocab_size": 256})
            export_module(d, head)
            with self.assertRaisesRegex(ValueError, "vocab_size"):
                load_head(d, other)


if __name__ == "__main__":
    unittest.main()
