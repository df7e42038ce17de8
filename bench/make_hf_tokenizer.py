"""A Hugging Face tokenizer directory (tokenizer.json + tokenizer_config.json)
from a GGUF file's byte-level BPE vocabulary, for tools that want one and
cannot reach a hub (aiperf's --tokenizer). Uses the `gguf` and `tokenizers`
packages; refuses vocabularies that are not GPT-2-style BPE.

  python bench/make_hf_tokenizer.py MODEL.gguf OUT_DIR
"""
import json
import os
import sys

import gguf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors


def field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    if len(f.data) == 1 and f.types[0] != gguf.GGUFValueType.ARRAY:
        v = f.parts[f.data[0]]
        return bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else v[0]
    return [bytes(f.parts[i]).decode("utf-8", "replace") if f.types[-1] == gguf.GGUFValueType.STRING
            else f.parts[i][0] for i in f.data]


def main():
    model_path, out = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(model_path)
    if field(r, "tokenizer.ggml.model") != "gpt2":
        sys.exit("only byte-level BPE (tokenizer.ggml.model = gpt2) vocabularies are supported")
    tokens = field(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field(r, "tokenizer.ggml.merges")]
    types = field(r, "tokenizer.ggml.token_type") or [1] * len(tokens)
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = [t for t, ty in zip(tokens, types) if ty == 3]  # CONTROL
    tok.add_special_tokens(specials)
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192,
              "clean_up_tokenization_spaces": False}
    for key, name in (("bos_token", "tokenizer.ggml.bos_token_id"), ("eos_token", "tokenizer.ggml.eos_token_id")):
        idx = field(r, name)
        if idx is not None:
            config[key] = tokens[int(idx)]
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
    print(out)


if __name__ == "__main__":
    main()
