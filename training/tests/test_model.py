"""The Python model agrees with the C++ runtime and with transformers.

  python3 -m unittest discover training/tests
"""
import json
import os
import subprocess
import sys
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "training"))
from specline_train.model import Llama2cTokenizer, load_hf, load_model, sample_batch  # noqa: E402

STORIES = os.path.join(REPO, "..", "shared", "models", "stories260K")
GOLDEN = os.path.join(REPO, "tests", "data", "golden")
TINY = os.path.join(REPO, "tests", "data", "tiny_models")


class Stories260kTest(unittest.TestCase):
    @unittest.skipUnless(os.path.exists(os.path.join(STORIES, "stories260K.bin")),
                         "../shared/models/stories260K is absent")
    def test_greedy_from_bos_matches_llama2c(self):
        # reference-greedy-from-bos-256.txt is the *text* llama2.c's run.c prints
        # (tests/stories260k_test.cc compares the C++ runtime to the same file):
        # 256 greedy steps from BOS, stop at BOS, decode, newline at the end.
        model = load_model(os.path.join(STORIES, "stories260K.bin"))
        tok = Llama2cTokenizer(os.path.join(STORIES, "tok512.bin"), model.cfg.vocab_size)
        ids = sample_batch(model, torch.tensor([[1]]), 256, 0.0, 1.0)[0].tolist()
        text, prev = b"", 1
        for t in ids:
            if t == 1:
                break
            text += tok.piece(prev, t)
            prev = t
        with open(os.path.join(STORIES, "reference-greedy-from-bos-256.txt"), "rb") as f:
            self.assertEqual(text + b"\n", f.read())

    @unittest.skipUnless(os.path.exists(os.path.join(STORIES, "stories260K.bin")),
                         "../shared/models/stories260K is absent")
    def test_kv_cache_equals_full_forward(self):
        model = load_model(os.path.join(STORIES, "stories260K.bin"))
        toks = torch.randint(0, model.cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            full, hid = model(toks)
            cache = model.new_cache()
            a, _ = model(toks[:, :5], 0, cache)
            b, hb = model(toks[:, 5:], 5, cache)
        torch.testing.assert_close(torch.cat([a, b], 1), full, atol=1e-5, rtol=1e-5)
        self.assertEqual(len(hid), model.cfg.n_layers + 1)
        torch.testing.assert_close(hb[2], hid[2][:, 5:], atol=1e-5, rtol=1e-5)


SMOLLM2 = os.path.expanduser("~/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf")


class GgufTest(unittest.TestCase):
    @unittest.skipUnless(os.path.exists(os.path.join(STORIES, "stories260K.gguf")),
                         "../shared/models/stories260K is absent")
    def test_gguf_equals_llama2c_file(self):
        # The same weights in both formats: GGUF's interleaved q/k rows are
        # permuted like llama2.c's, so the logits are identical.
        a = load_model(os.path.join(STORIES, "stories260K.bin"))
        b = load_model(os.path.join(STORIES, "stories260K.gguf"))
        x = torch.tensor([[1, 400, 30, 200, 5, 77, 301, 12]])
        with torch.no_grad():
            self.assertEqual((a(x)[0] - b(x)[0]).abs().max().item(), 0.0)

    @unittest.skipUnless(os.path.exists(SMOLLM2), "the default model (SmolLM2-135M Q4_1) is not in the cache")
    def test_quantized_default_model_decodes_like_the_cxx_runtime(self):
        # Dequantized Q4_1 / Q8_0 in fp32 against the C++ kernels on fp32
        # activations (their default, int8 activations as llama.cpp, moves
        # near ties: docs/kernels.md): the same greedy tokens from BOS.
        sys.path.insert(0, HERE)
        from test_heads import specline_binary
        exe = specline_binary()
        if exe is None:
            self.skipTest("no specline binary")
        want = load_model(SMOLLM2).generate([1], 16)
        g = subprocess.run([exe, "generate", "--model", SMOLLM2, "--max-tokens", "16", "--ignore-eos",
                            "--show-ids", "--threads", "2"], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, SPECLINE_FP32_ACTIVATIONS="1"))
        self.assertEqual(g.returncode, 0, g.stderr)
        self.assertEqual([int(x) for x in g.stderr.strip().splitlines()[-1].split()], want)


# The model types specline_train.model.hf_config reads.
TRAINABLE_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


class HfTinyModelsTest(unittest.TestCase):
    """Our forward vs transformers in float64, through the golden files the
    C++ golden_logits_test also uses (so no transformers install is needed)."""

    def test_matches_transformers_golden(self):
        names = sorted(os.listdir(TINY)) if os.path.isdir(TINY) else []
        if not names:
            self.skipTest("tests/data/tiny_models is absent")
        checked = 0
        for name in names:
            golden_path = os.path.join(GOLDEN, name + ".json")
            if not os.path.exists(golden_path):
                continue
            # The training recipes' model covers the Llama family only; the
            # Gemma, Phi-3 and MoE tiny models are checked by the C++
            # golden_logits_test alone.
            with open(os.path.join(TINY, name, "config.json")) as f:
                if json.load(f)["model_type"] not in TRAINABLE_MODEL_TYPES:
                    continue
            with self.subTest(model=name):
                with open(golden_path) as f:
                    g = json.load(f)
                ours = load_hf(os.path.join(TINY, name))
                toks = torch.tensor([g["input_ids"]])
                with torch.no_grad():
                    logits, hidden = ours(toks)
                want = torch.tensor(g["prefill"]["logits"], dtype=torch.float32)
                self.assertLess((logits[0] - want).abs().max().item(), 1e-4)
                pre = torch.tensor(g["hidden_states"]["last_layer_output_prenorm"], dtype=torch.float32)
                self.assertLess((hidden[ours.cfg.n_layers][0] - pre).abs().max().item(), 1e-4)
                checked += 1
        self.assertGreaterEqual(checked, 5, "the Llama-family tiny models were not all found")


if __name__ == "__main__":
    unittest.main()
