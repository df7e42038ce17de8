#!/usr/bin/env python3
"""Golden dequantized values for the GGML quant types (kquant_golden_test).

Writes tests/data/kquants/:
  fixtures.gguf  quantized tensors, bytes exactly as written by llama.cpp's
                 `llama-quantize` (row slices of real Q2_K ... Q6_K, Q5_0,
                 Q5_1, Q4_0, Q4_1, Q8_0 model files, mixtures included), plus
                 random-byte blocks of every type (all bit patterns of the
                 quants and sub-block scales, finite fp16 super-scales)
  golden.f32     gguf.quants.dequantize (the `gguf` package's NumPy
                 dequantizer) of every fixture tensor, float32 little-endian,
                 concatenated in manifest order
  golden.json    manifest: name, type, shape, offset into golden.f32 (in
                 floats), sha256 of the golden bytes, provenance

Steps: `specline make-random-model` writes small random F32 llama models
(dims multiples of 256; model "b" has a 352-wide FFN, so llama-quantize
falls back to Q5_0/Q5_1/Q8_0 for ffn_down as it does for real models), then
llama-quantize makes each file type from them, then a few rows of one
tensor per (file type, tensor type) are kept. The C++ test only needs the
committed outputs; llama-quantize and Python are needed only to regenerate:

  python3 -m pip install gguf numpy
  python3 scripts/reference/kquant_golden.py --specline build/specline \
      --llama-quantize "$(bash ../shared/tools/llama-cpp-peer.sh)/llama-quantize"

Deterministic for a given llama.cpp build (the random models come from
fixed seeds; llama-quantize's reference quantizers are deterministic).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# File types asked of llama-quantize, per source model.
FILE_TYPES = {
    "a": ["Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M",
          "Q6_K", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q8_0"],
    "b": ["Q4_K_M", "Q5_K_M", "Q6_K"],
}
MODELS = {
    # name: make-random-model arguments
    "a": ["--dim", "256", "--hidden-dim", "512", "--layers", "2", "--heads", "2",
          "--vocab", "256", "--seq-len", "256", "--seed", "11"],
    "b": ["--dim", "256", "--hidden-dim", "352", "--layers", "2", "--heads", "2",
          "--vocab", "256", "--seq-len", "256", "--seed", "12"],
}
ROWS = 8  # rows kept per tensor

# Types the C++ decoders must match bit for bit.
GOLDEN_TYPES = {Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K}

# Byte offsets of the fp16 scales in a block (set to finite values in the
# random-byte blocks: NaN payloads are not part of the contract).
SCALE_OFFSETS = {
    Q.Q4_0: [0], Q.Q5_0: [0], Q.Q8_0: [0], Q.Q4_1: [0, 2], Q.Q5_1: [0, 2],
    Q.Q2_K: [80, 82], Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208],
}


def run(cmd):
    print("+", " ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{p.stdout}")
    return p.stdout


def random_blocks(qtype, rows, cols, rng):
    """rows x cols elements of random bytes with finite fp16 scales."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nblocks = rows * cols // block
    raw = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
    for off in SCALE_OFFSETS[qtype]:
        # Exponents 2^-24 (subnormal) .. 2^3, either sign; some exact zeros.
        h = rng.integers(0, 1 << 16, size=nblocks, dtype=np.uint32)
        exp = rng.integers(0, 19, size=nblocks, dtype=np.uint32)  # biased 0..18
        h = (h & 0x83FF) | (exp << 10)
        h[rng.random(nblocks) < 0.03] = 0
        raw[:, off:off + 2] = h.astype("<u2").view(np.uint8).reshape(nblocks, 2)
    return raw.reshape(rows, -1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specline", required=True, help="the specline binary")
    ap.add_argument("--llama-quantize", required=True, help="llama.cpp's llama-quantize")
    ap.add_argument("--out", default=os.path.join(REPO, "tests/data/kquants"))
    ap.add_argument("--work", default=None, help="folder for the intermediate models (default: a temp dir)")
    args = ap.parse_args()

    work = args.work or tempfile.mkdtemp(prefix="kquant-golden-")
    os.makedirs(work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    llama_version = "unknown"
    selected = []  # (fixture name, ggml type, uint8 rows, source)
    for model, mk_args in MODELS.items():
        f32 = os.path.join(work, f"{model}-F32.gguf")
        run([args.specline, "make-random-model", "--out", f32, "--format", "gguf", *mk_args])
        for ftype in FILE_TYPES[model]:
            out = os.path.join(work, f"{model}-{ftype}.gguf")
            log = run([args.llama_quantize, f32, out, ftype, "1"])
            for line in log.splitlines():
                if line.startswith("version:"):  # "version: 0.5.0-dev (build 1, commit 0c1e570)"
                    llama_version = line.split(":", 1)[1].strip()
            reader = gguf.GGUFReader(out)
            seen = set()
            for t in reader.tensors:
                if t.tensor_type not in GOLDEN_TYPES or len(t.shape) != 2:
                    continue
                if t.tensor_type in seen:
                    continue
                seen.add(t.tensor_type)
                data = np.asarray(t.data)  # (rows, row_bytes) uint8
                r0 = (len(selected) * 24) % (data.shape[0] - ROWS + 1)
                rows = np.ascontiguousarray(data[r0:r0 + ROWS])
                name = f"{model}-{ftype}/{t.name}"
                source = {"file_type": ftype, "model": model,
                          "make_random_model": " ".join(mk_args),
                          "tensor": t.name, "row0": r0}
                selected.append((name, t.tensor_type, rows, source))

    rng = np.random.Generator(np.random.PCG64(20250101))
    for qtype in [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]:
        rows = random_blocks(qtype, 4, 1024, rng)
        selected.append((f"random/{qtype.name}", qtype, rows,
                         {"random": "bytes from numpy PCG64 seed 20250101, finite fp16 scales"}))

    fixture = os.path.join(args.out, "fixtures.gguf")
    w = gguf.GGUFWriter(fixture, arch="kquant-fixtures")
    w.add_string("general.description",
                 "specline kquant_golden_test fixtures (scripts/reference/kquant_golden.py)")
    for name, qtype, rows, _ in selected:
        w.add_tensor(name, rows, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # Read the fixture back and dequantize what is stored there.
    reader = gguf.GGUFReader(fixture)
    by_name = {t.name: t for t in reader.tensors}
    manifest = []
    offset = 0
    with open(os.path.join(args.out, "golden.f32"), "wb") as f:
        for name, qtype, rows, source in selected:
            t = by_name[name]
            assert t.tensor_type == qtype
            stored = np.asarray(t.data)
            assert np.array_equal(stored, rows), name
            values = dequantize(stored, qtype).astype("<f4", copy=False)
            assert values.dtype == np.float32 and values.ndim == 2
            blob = values.tobytes()
            f.write(blob)
            manifest.append({
                "name": name, "type": qtype.name, "shape": list(values.shape),
                "offset": offset, "sha256": hashlib.sha256(blob).hexdigest(), **source,
            })
            offset += values.size
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump({
            "generator": "scripts/reference/kquant_golden.py",
            "dequantizer": f"gguf {pkg_version('gguf')} gguf.quants.dequantize, numpy {np.__version__}",
            "llama_quantize": llama_version,
            "tensors": manifest,
        }, f, indent=1)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(args.out, n)) for n in ("fixtures.gguf", "golden.f32", "golden.json"))
    print(f"{len(manifest)} tensors, {offset} values, {total} bytes in {args.out}", file=sys.stderr)


def pkg_version(name):
    from importlib.metadata import version
    return version(name)


if __name__ == "__main__":
    main()
