"""A tiny base-model training run (seconds) on the training recipes' own
sources: the loss falls, the exported llama2.c file re-reads with the same
logits, the tokenizer's encoding round-trips, and the C++ runtime decodes
the file greedily to the same tokens as PyTorch (`specline generate`)."""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "training"))
sys.path.insert(0, HERE)
import train_base  # noqa: E402
from specline_train.model import Llama2cTokenizer, load_llama2c  # noqa: E402
from test_heads import specline_binary  # noqa: E402

TOK = os.path.join(REPO, "..", "shared", "models", "stories260K", "tok512.bin")


def decode(tok, ids):
    out = b""
    for i in ids:
        p = tok.pieces[i]
        out += bytes([int(p[3:5], 16)]) if len(p) == 6 and p.startswith(b"<0x") else p
    return out.decode("utf-8")


@unittest.skipUnless(os.path.exists(TOK), "../shared/models/stories260K is absent")
class TinyBaseTrainingTest(unittest.TestCase):
    def test_encode_round_trips_any_text(self):
        tok = Llama2cTokenizer(TOK)
        self.assertEqual(tok.vocab_size, 512)
        for text in ["def f(x):\n    return x  # ok\n", "naïve — 東京 \t\r\n", ""]:
            ids = tok.encode(text)
            self.assertEqual(decode(tok, ids), text)
        self.assertLess(len(tok.encode("    return self\n")), len("    return self\n"))

    def test_tiny_run_exports_a_model_the_cxx_runtime_serves(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        out = os.path.join(d, "model.bin")
        corpus = os.path.join(REPO, "training", "**", "*.py")
        self.assertGreater(len(glob.glob(corpus, recursive=True)), 4)
        r = train_base.train(train_base_args(corpus, out))
        losses = r["losses"]
        self.assertLess(sum(losses[-10:]) / 10, 0.8 * sum(losses[:10]) / 10, losses)
        meta = r["meta"]
        self.assertLess(meta["eval_loss_after"], meta["eval_loss_before"])
        self.assertTrue(os.path.exists(os.path.join(d, "tokenizer.bin")))
        self.assertTrue(os.path.exists(os.path.join(d, "model.json")))
        back = load_llama2c(out)  # train() already checked its logits
        self.assertEqual((back.cfg.dim, back.cfg.n_layers, back.cfg.vocab_size), (64, 2, 512))
        want = back.generate([1], 24)
        exe = specline_binary()
        if exe is None:
            self.skipTest("the C++ decode check: no specline binary")
        g = subprocess.run([exe, "generate", "--model", out, "--max-tokens", "24", "--ignore-eos",
                            "--show-ids", "--threads", "1"], capture_output=True, text=True, timeout=60)
        self.assertEqual(g.returncode, 0, g.stderr)
        ids = [int(x) for x in g.stderr.strip().splitlines()[-1].split()]
        self.assertEqual(ids, want)


def train_base_args(corpus, out):
    return train_base.parser().parse_args([
        "--corpus", corpus, "--max-corpus-bytes", "400000", "--eval-files", "1",
        "--tokenizer", TOK, "--dim", "64", "--layers", "2", "--steps", "80",
        "--seq-len", "64", "--batch", "8", "--lr", "3e-3", "--log-every", "1000",
        "--threads", "2", "--device", "cpu", "--out", out])


if __name__ == "__main__":
    unittest.main()
