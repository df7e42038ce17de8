"""PIPO (pair-in, pair-out): compressor init, the reference decoder's
semantics (tau > 1 = the backbone decoding pair by pair, KV-cached decoding =
the teacher-forced forward, PAD never emitted, odd prompts padded), the
teacher's PAD compaction, export/load round trip, a seconds-long training
run, and the golden for the C++ side (training/tests/data/pipo_golden.json)."""
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
from specline_train.model import load_llama2c  # noqa: E402
from specline_train.pipo import (PipoModel, backbone_pairwise_generate, export_pipo, load_pipo,  # noqa: E402
                                 pad_prompt, pipo_generate, teacher_logprobs)

STORIES_BIN = os.path.join(REPO, "..", "shared", "models", "stories260K", "stories260K.bin")
GOLDEN = os.path.join(HERE, "data", "pipo_golden.json")
HEAD = os.path.join(REPO, "training", "heads", "stories260K", "pipo")

torch.set_num_threads(1)
_BASE = None


def base_model():
    global _BASE
    if _BASE is None:
        _BASE = load_llama2c(STORIES_BIN)
        for p in _BASE.parameters():
            p.requires_grad_(False)
    return _BASE


def noisy_model(seed=0, conf_scale=3.0):
    """A PIPO model from the base with seeded noise on every head and on the
    backbone projections, and a random confidence head whose output spreads
    over (0, 1), so that decoding mixes accepted and rejected drafts."""
    m = PipoModel.from_base(base_model(), seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.requires_grad:
                p.add_(0.02 * torch.randn(p.shape, generator=g))
        m.confidence.fc2.weight.copy_(conf_scale * torch.randn(m.confidence.fc2.weight.shape, generator=g))
    return m.eval()


PROMPTS = ([1], [1, 403, 407], [1, 403, 407, 261], [1, 403, 407, 261, 378, 432, 383])


@unittest.skipUnless(os.path.exists(STORIES_BIN), "../shared/models/stories260K is absent")
class PipoSemanticsTest(unittest.TestCase):
    def test_compressor_init_is_the_sum(self):
        m = PipoModel.from_base(base_model())
        g = torch.Generator().manual_seed(0)
        E = base_model().model.embed_tokens.weight
        ids = torch.randint(0, 512, (200, 2), generator=g)
        a, b = E[ids[:, 0]], E[ids[:, 1]]
        with torch.no_grad():
            z = m.compressor(torch.cat([a, b], -1))
            self.assertLess((z - (a + b)).abs().max().item(), 1e-5)
            x = 5 * torch.randn(50, 128, generator=g)     # any inputs, not only embeddings
            self.assertLess((m.compressor(x) - (x[:, :64] + x[:, 64:])).abs().max().item(), 1e-4)
            # and the model's pair embedding uses it on consecutive tokens
            s = torch.tensor([[1, 403, 407, 0]])
            zz = m.compress(s)[0]
            self.assertLess((zz[1] - (E[407] + E[0])).abs().max().item(), 1e-5)
        self.assertEqual(tuple(m.compressor.fc1.weight.shape), (128, 128))
        self.assertEqual(tuple(m.compressor.fc2.weight.shape), (64, 128))

    def test_tau_above_one_is_pair_by_pair_backbone_decoding(self):
        m = noisy_model(1)
        for p in PROMPTS:
            for temp, seed in ((0.0, 0), (1.0, 3), (0.8, 11)):
                with self.subTest(prompt=len(p), temperature=temp):
                    info = pipo_generate(m, p, 21, tau=1.01, temperature=temp, seed=seed, return_info=True)
                    ref = backbone_pairwise_generate(m, p, 21, temperature=temp, seed=seed)
                    self.assertEqual(info["tokens"], ref)
                    self.assertFalse(any(s["accepted"] for s in info["steps"]))
                    self.assertEqual(len(info["steps"]), 21)       # one token per backbone step
                    tail = info["stream"][len(info["padded_prompt"]):]
                    self.assertEqual(tail[1::2], [m.pad_id] * 21)
                    self.assertEqual(tail[0::2], ref)
        # with acceptance the output differs from it (the comparison can fail)
        acc = pipo_generate(m, PROMPTS[1], 21, tau=0.0)
        self.assertNotEqual(acc, backbone_pairwise_generate(m, PROMPTS[1], 21))

    def test_cached_decoding_equals_teacher_forced_forward(self):
        m = noisy_model(2)
        seen = []
        for p in PROMPTS:
            for temp in (0.0, 1.0):
                with self.subTest(prompt=len(p), temperature=temp):
                    info = pipo_generate(m, p, 40, tau=0.5, temperature=temp, seed=5, return_info=True)
                    steps = info["steps"]
                    n = len(info["padded_prompt"]) // 2
                    with torch.no_grad():
                        f = m.forward_pairs(torch.tensor([info["stream"]]))
                    K = len(steps)
                    self.assertEqual(f["conf_logit"].shape[1], n - 1 + K)
                    conf = torch.sigmoid(f["conf_logit"][0, n - 1:])
                    got = torch.tensor([s["conf"] for s in steps])
                    self.assertLess((conf - got).abs().max().item(), 1e-5)
                    # the stream's pairs are exactly the emitted tokens
                    out = [t for t in info["stream"][2 * n:] if t != m.pad_id]
                    self.assertEqual(out[:40], info["tokens"])
                    if temp == 0.0:
                        l1 = f["logits1"][0, n - 1:].clone()
                        l2 = f["logits2"][0, n - 1:].clone()
                        l1[:, m.pad_id] = l2[:, m.pad_id] = float("-inf")
                        self.assertEqual(l1.argmax(-1).tolist(), [s["t1"] for s in steps])
                        self.assertEqual(l2.argmax(-1).tolist(), [s["t2_proposed"] for s in steps])
                    seen += [s["accepted"] for s in steps]
        self.assertTrue(any(seen) and not all(seen), seen)   # both kinds of step were checked

    def test_pad_is_never_emitted(self):
        m = noisy_model(3)
        bump = torch.zeros(512)
        bump[m.pad_id] = 100.0           # PAD would be every head's argmax without the mask
        m.logits1 = lambda h: PipoModel.logits1(m, h) + bump
        m.logits2 = lambda h: PipoModel.logits2(m, h) + bump
        with torch.no_grad():
            f = m.forward_pairs(torch.tensor([[1, 403, 407, 261]]))
        self.assertEqual(int(f["logits1"][0, 0].argmax()), m.pad_id)
        for tau in (0.0, 0.5, 1.01):
            for temp in (0.0, 1.0):
                with self.subTest(tau=tau, temperature=temp):
                    info = pipo_generate(m, PROMPTS[2], 30, tau=tau, temperature=temp, seed=1, return_info=True)
                    self.assertEqual(len(info["tokens"]), 30)
                    self.assertNotIn(m.pad_id, info["tokens"])
                    tail = info["stream"][len(info["padded_prompt"]):]
                    self.assertNotIn(m.pad_id, tail[0::2])       # PAD only ever in the second slot

    def test_padding_of_prompts(self):
        self.assertEqual(pad_prompt([1, 5, 6], 0), [1, 5, 6, 0])
        self.assertEqual(pad_prompt([1, 5], 0), [1, 5])
        self.assertEqual(pad_prompt([1], 7), [1, 7])
        with self.assertRaises(ValueError):
            pad_prompt([], 0)
        with self.assertRaises(ValueError):
            pad_prompt([1, 0, 3], 0)
        m = noisy_model(4)
        odd = pipo_generate(m, [1, 403, 407], 6, tau=0.5, return_info=True)
        self.assertEqual(odd["padded_prompt"], [1, 403, 407, m.pad_id])
        self.assertEqual(odd["stream"][:4], [1, 403, 407, m.pad_id])
        even = pipo_generate(m, [1, 403, 407, 261], 6, tau=0.5, return_info=True)
        self.assertEqual(even["padded_prompt"], [1, 403, 407, 261])
        # the odd prompt's last pair (407, PAD) is what the backbone saw: the same as decoding
        # from the even stream [1, 403, 407, PAD] pair by pair
        self.assertEqual(backbone_pairwise_generate(m, [1, 403, 407], 5),
                         pipo_generate(m, [1, 403, 407], 5, tau=2.0))

    def test_teacher_pad_compaction(self):
        base = base_model()
        stream = torch.tensor([[1, 403, 407, 0, 261, 378, 432, 0, 383, 286]])
        lp1, lp2 = teacher_logprobs(base, stream, 0)
        clean = torch.tensor([[1, 403, 407, 261, 378, 432, 383, 286]])
        with torch.no_grad():
            ref = torch.log_softmax(base(clean)[0][0], -1)
        # pair j: token1 after stream[..2j+1], token2 after stream[..2j+2]
        # clean indices: stream pos 1->1, 3(PAD)->2, 5->4, 7(PAD)->5 ; 2->2, 4->3, 6->5, 8->6
        for j, (c1, c2) in enumerate([(1, 2), (2, 3), (4, 5), (5, 6)]):
            self.assertLess((lp1[0, j] - ref[c1]).abs().max().item(), 1e-5)
            self.assertLess((lp2[0, j] - ref[c2]).abs().max().item(), 1e-5)

    def test_export_load_round_trip(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        m = noisy_model(5)
        out = os.path.join(d, "pipo")
        export_pipo(out, m, {"recipe": "test"}, base_path=STORIES_BIN)
        with open(os.path.join(out, "head.json")) as f:
            j = json.load(f)
        self.assertEqual((j["format"], j["method"]), ("specline.head.v1", "pipo"))
        self.assertEqual(j["pipo"]["pad_id"], 0)
        self.assertEqual(j["pipo"]["tau_default"], 0.95)
        self.assertEqual(j["pipo"]["backbone"]["file"], "backbone.bin")
        self.assertEqual(j["tensors"]["mtp.layers.0.self_attn.k_proj.weight"], [32, 64])
        self.assertEqual(j["tensors"]["confidence.fc2.weight"], [1, 64])
        m2 = load_pipo(out, base_model())
        sd, sd2 = m.state_dict(), m2.state_dict()
        self.assertEqual(set(sd), set(sd2))
        for k in sd:
            self.assertTrue(torch.equal(sd[k], sd2[k]), k)    # llama2.c round trip is exact
        self.assertFalse(torch.equal(sd["backbone.model.layers.0.self_attn.q_proj.weight"],
                                     base_model().state_dict()["model.layers.0.self_attn.q_proj.weight"]))
        p = PROMPTS[3]
        self.assertEqual(pipo_generate(m, p, 30, tau=0.5), pipo_generate(m2, p, 30, tau=0.5))
        # a tampered backbone or head.json is refused
        with open(os.path.join(out, "backbone.bin"), "r+b") as f:
            f.seek(100)
            f.write(b"\x00\x00\x80\x3f")
        with self.assertRaises(ValueError):
            load_pipo(out, base_model())
        export_pipo(out, m)
        with open(os.path.join(out, "head.json")) as f:
            j = json.load(f)
        j["tensors"]["mtp.fc.weight"] = [64, 64]
        with open(os.path.join(out, "head.json"), "w") as f:
            json.dump(j, f)
        with self.assertRaises(ValueError):
            load_pipo(out, base_model())

    def test_seconds_long_training_lowers_the_loss(self):
        import train_pipo
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        out = os.path.join(d, "pipo")
        r = train_pipo.train(STORIES_BIN, out, "both", steps=40, distill_steps=4, batch=8, n_pairs=16,
                             rollout_steps=6, n_train=32, n_eval=8, length=48, seed=3, log_every=1000,
                             quiet=True, eval_prompts=2)
        c = r["curves"]["sft"]
        self.assertLess(sum(c[-5:]) / 5, 0.6 * sum(c[:5]) / 5, c)
        self.assertLess(r["after"]["ce1"], r["before"]["ce1"])
        self.assertLess(r["after"]["ce2"], r["before"]["ce2"])
        self.assertEqual(len(r["curves"]["distill"]), 4)
        m = load_pipo(out, base_model())
        self.assertEqual(len(pipo_generate(m, [1, 403], 10)), 10)


@unittest.skipUnless(os.path.exists(GOLDEN) and os.path.exists(HEAD) and os.path.exists(STORIES_BIN),
                     "pipo golden, head or stories260K absent")
class PipoGoldenTest(unittest.TestCase):
    def test_golden_matches_a_fresh_computation(self):
        import pipo_golden
        with open(GOLDEN) as f:
            g = json.load(f)
        self.assertLess(os.path.getsize(GOLDEN), 200_000)
        model = load_pipo(HEAD, base_model())
        fresh = pipo_golden.compute_golden(model, g["prompt"], g["greedy"]["even_prompt_tau_0.95"]["prompt"])
        self.assertEqual(len(g["prompt"]) % 2, 1)                     # the golden covers padding
        self.assertEqual(g["padded_prompt"], g["prompt"] + [g["pad_id"]])

        def close(a, b, path):
            if isinstance(a, dict):
                self.assertEqual(set(a), set(b), path)
                for k in a:
                    close(a[k], b[k], f"{path}.{k}")
            elif isinstance(a, list):
                self.assertEqual(len(a), len(b), path)
                for i, (x, y) in enumerate(zip(a, b)):
                    close(x, y, f"{path}[{i}]")
            elif isinstance(a, float):
                self.assertLess(abs(a - b), 1e-4 * max(1.0, abs(a)), path)
            else:
                self.assertEqual(a, b, path)
        close(g, fresh, "golden")
        # the two greedy runs the C++ side must reproduce differ in acceptance
        self.assertEqual(g["greedy"]["tau_1.01"]["accepted"], 0)
        self.assertEqual(len(g["greedy"]["tau_1.01"]["tokens"]), 64)


if __name__ == "__main__":
    unittest.main()
