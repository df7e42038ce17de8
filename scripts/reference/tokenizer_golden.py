#!/usr/bin/env python3
"""Writes the tokenizer goldens under tests/data/tokenizer/ from the reference
implementations: the `sentencepiece` package for .model files, HF `tokenizers`
for SmolLM2's byte-level BPE (built from the GGUF's vocab and merges with the
pre-tokenizer of SmolLM2's tokenizer.json: Digits(individual) + ByteLevel),
the `regex` module for the pre-tokenizer splits, and jinja2 configured as
transformers' apply_chat_template does for the chat templates.

Also trains tests/data/tokenizer/unigram_small.model (a few KB) with the
sentencepiece trainer so the unigram path and a precompiled charsmap are
covered by a committed file.

Run from the repository root:
  python3 scripts/reference/tokenizer_golden.py [--shared ../shared/models]
      [--smollm2 ~/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import json
import os
import tempfile

OUT = "tests/data/tokenizer"

TEXTS = [
    "",
    "Hello world",
    "Hello, world!",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "multiple   inner    spaces",
    "   ",
    " ",
    "line one\nline two\n\nline four\n",
    "\n\nnewlines first",
    "tabs\tand\t\tmore\ttabs",
    "mixed \t \n whitespace \r\n windows",
    "Once upon a time, there was a little girl named Lily.",
    "She said, \"I'm sorry, mom. I didn't know what to do.\"",
    "Numbers: 0 7 42 123 1234 12345 3.14159 -273.15 1,000,000",
    "Phone 555-0199, year 2024, id #A1B2C3",
    "Punctuation!!! ??? ... --- (parens) [brackets] {braces} <angles>",
    "It's they're we've I'm you'll he'd IT'S THEY'RE",
    "Café naïve résumé façade Ångström crème brûlée",
    "Ünïcödé àccents: é (precomposed) vs e\u0301 (combining)",
    "日本語のテキストです。中文文本。한국어 텍스트.",
    "Emoji: 😀 🎉 👍🏽 ❤️",
    "ZWJ family: 👨\u200d👩\u200d👧\u200d👦 and flag 🇫🇷",
    "def add(a, b):\n    return a + b  # sum\n",
    "for (int i = 0; i < n; ++i) { sum += x[i]; }",
    "<html><body class=\"x\">Hi &amp; bye</body></html>",
    "Mixed scripts: Hello Привет Γειά σου שלום مرحبا नमस्ते",
    "URL: https://example.com/path?q=1&r=two#frag",
    "email@example.org",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
    "a",
    "\u00a0non-breaking\u00a0space and\u2003em space",
    "ends with newline\n",
    "Fullwidth ＡＢＣ and ① circled",
]

SMOL_SPECIAL_TEXTS = [
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<|im_start|><|im_end|>",
    "not special: <|im_start but <|im_end|> is",
]

PRETOKENIZER_PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}

CONVERSATIONS = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " What is 2+2? "}],
    [
        {"role": "user", "content": "Tell me a joke."},
        {"role": "assistant", "content": "Why did the chicken cross the road?"},
        {"role": "user", "content": "Why?\n"},
    ],
    [
        {"role": "system", "content": "You are a pirate."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": " Arr! "},
        {"role": "user", "content": "Où est le trésor? 🏴\u200d☠️"},
    ],
]

# Template file -> (bos_token, eos_token) the family uses.
CHAT_TEMPLATES = {
    "chatml": ("<s>", "<|im_end|>"),
    "chatml_default_system": ("<s>", "<|im_end|>"),
    "llama2": ("<s>", "</s>"),
    "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
    "zephyr": ("<s>", "</s>"),
    "mistral": ("<s>", "</s>"),
    "gemma": ("<bos>", "<eos>"),
    "phi3": ("<s>", "<|endoftext|>"),
}


def write(name, obj):
    path = os.path.join(OUT, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", path)


def spm_golden(name, model_path, source):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model_path)
    cases = []
    for text in TEXTS:
        ids = sp.encode(text)
        cases.append({"text": text, "ids": ids, "decoded": sp.decode(ids)})
    write(f"{name}.json", {"tokenizer": name, "source": source,
                           "reference": f"sentencepiece {spm.__version__}", "cases": cases})


def train_unigram():
    """A small unigram model with a custom normalization rule (so it carries
    a precompiled charsmap), a user-defined symbol and no byte fallback."""
    import sentencepiece as spm

    corpus = "\n".join(TEXTS * 3 + [
        "the quick brown fox jumps over the lazy dog",
        "pack my box with five dozen liquor jugs",
        "a unigram language model picks the most likely segmentation",
    ] * 20)
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "corpus.txt"), "w", encoding="utf-8") as f:
            f.write(corpus)
        with open(os.path.join(tmp, "rules.tsv"), "w", encoding="utf-8") as f:
            # Fullwidth A-C -> ASCII, circled one -> "1", tab -> space.
            f.write("FF21\t41\nFF22\t42\nFF23\t43\n2460\t31\n9\t20\n")
        spm.SentencePieceTrainer.train(
            input=os.path.join(tmp, "corpus.txt"), model_prefix=os.path.join(OUT, "unigram_small"),
            model_type="unigram", vocab_size=220, character_coverage=0.98,
            normalization_rule_tsv=os.path.join(tmp, "rules.tsv"),
            user_defined_symbols=["<sep>"], byte_fallback=False, minloglevel=2)
    os.remove(os.path.join(OUT, "unigram_small.vocab"))


def smollm2_tokenizer(gguf_path):
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    reader = GGUFReader(gguf_path)

    def strings(key):
        f = reader.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = strings("tokenizer.ggml.merges")
    f = reader.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab, [tuple(m.split(" ", 1)) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    template = bytes(reader.fields["tokenizer.chat_template"].parts[-1]).decode("utf-8")
    return tok, template


def smollm2_golden(gguf_path):
    import tokenizers

    tok, template = smollm2_tokenizer(gguf_path)
    cases = []
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)})
    special = []
    for text in SMOL_SPECIAL_TEXTS:
        tok.encode_special_tokens = False
        parsed = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        special.append({"text": text, "ids_parse_special": parsed, "ids_plain": plain})
    tok.encode_special_tokens = False
    write("smollm2.json", {"tokenizer": "smollm2", "source": "SmolLM2-135M-Instruct.Q4_1.gguf",
                           "reference": f"tokenizers {tokenizers.__version__}",
                           "cases": cases, "special_cases": special})
    return template


def pretokenize_golden():
    import regex

    out = {}
    for name, pattern in PRETOKENIZER_PATTERNS.items():
        out[name] = [{"text": t, "chunks": regex.findall(pattern, t)} for t in TEXTS]
    # SmolLM2: each \p{N} alone first, then the GPT-2 pattern per stretch.
    smol = []
    for t in TEXTS:
        chunks = []
        for part in regex.split(r"(\p{N})", t):
            if part:
                chunks += regex.findall(PRETOKENIZER_PATTERNS["gpt2"], part)
        smol.append({"text": t, "chunks": chunks})
    out["smollm"] = smol
    write("pretokenize.json", out)


def chat_golden(smollm2_template):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # What transformers' apply_chat_template sets up.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(message):
        raise ValueError(message)

    env.globals["raise_exception"] = raise_exception
    sources = {name: open(os.path.join(OUT, "chat_templates", name + ".jinja"), encoding="utf-8").read()
               for name in CHAT_TEMPLATES}
    entries = []
    for name, (bos, eos) in CHAT_TEMPLATES.items():
        entries.append(render(env, name, sources[name], bos, eos, f"chat_templates/{name}.jinja"))
    if smollm2_template is not None:
        entries.append(render(env, "smollm2", smollm2_template, "<|im_start|>", "<|im_end|>",
                              "gguf:tokenizer.chat_template"))
    write("chat_templates.json", entries)


def render(env, name, source, bos, eos, where):
    template = env.from_string(source)
    renders = []
    for messages in CONVERSATIONS:
        for gen in (False, True):
            try:
                text = template.render(messages=messages, add_generation_prompt=gen,
                                       bos_token=bos, eos_token=eos)
            except ValueError:
                continue  # the template refuses this conversation (e.g. system role)
            renders.append({"messages": messages, "add_generation_prompt": gen, "text": text})
    return {"name": name, "template": where, "bos_token": bos, "eos_token": eos,
            "renders": renders}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default="../shared/models")
    ap.add_argument("--smollm2", default=os.path.expanduser(
        "~/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    spm_golden("stories260k", os.path.join(args.shared, "stories260K/tok512.model"), "stories260K/tok512.model")
    spm_golden("llama2", os.path.join(args.shared, "llama2-tokenizer/tokenizer.model"),
               "llama2-tokenizer/tokenizer.model")
    train_unigram()
    spm_golden("unigram_small", os.path.join(OUT, "unigram_small.model"), "tests/data/tokenizer/unigram_small.model")
    template = smollm2_golden(args.smollm2) if os.path.exists(args.smollm2) else None
    pretokenize_golden()
    chat_golden(template)


if __name__ == "__main__":
    main()
