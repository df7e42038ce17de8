#!/usr/bin/python3
"""Writes tests/data/llama_server/tokenize_golden.json: what llama-server's
POST /tokenize (with_pieces) and POST /detokenize answer on the default model
for a set of texts, so serving_llama_server_api_test can check specline's
/tokenize against llama.cpp's tokenizer on the same GGUF.

It starts the peer llama-server once (CPU, a 512-token context: only the
tokenizer is exercised), asks it, stops it. Never run by ctest: the peer is
built by hand (scripts/setup.sh does not build it), the committed JSON is
what the test reads.

The exact command that made the committed file:

  /usr/bin/python3 bench/llama_server_tokenize_golden.py \
      --peer ~/.cache/specline/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin \
      --model ~/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --out tests/data/llama_server/tokenize_golden.json
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

# Each case is a /tokenize body (without with_pieces, which is always true).
CASES = [
    {"content": "Hello world"},
    {"content": "The quick brown fox jumps over the lazy dog."},
    {"content": "  leading and trailing spaces   "},
    {"content": "tabs\tand\nnewlines\n\n\nruns      of   spaces"},
    {"content": "naïve café — “quotes” ünïcödé Ελληνικά"},
    {"content": "日本語のテキストと中文"},
    {"content": "emoji 🦙🚀👨‍👩‍👧 done"},
    {"content": "def f(x):\n    return x ** 2  # square\n"},
    {"content": "12345 3.14159 -42 0x1F"},
    {"content": "<|im_start|>user\nHi<|im_end|>\n", "parse_special": True},
    {"content": "<|im_start|>user\nHi<|im_end|>\n", "parse_special": False},
    {"content": "<fim_prefix>int x<fim_suffix>;<fim_middle>", "parse_special": True},
    {"content": "Hello", "add_special": True},
    {"content": ""},
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def wait_ready(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit(f"llama-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("llama-server did not become ready in 60 s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", required=True, help="llama.cpp's build/bin")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    port = free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=args.peer)
    proc = subprocess.Popen([os.path.join(args.peer, "llama-server"), "-m", args.model, "--port", str(port),
                             "-c", "512", "-np", "1", "-ngl", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_ready(port, proc)
        cases = []
        for case in CASES:
            pieces = post(port, "/tokenize", dict(case, with_pieces=True))["tokens"]
            ids = [t["id"] for t in pieces]
            plain = post(port, "/tokenize", case)["tokens"]
            assert plain == ids, (case, plain, ids)
            content = post(port, "/detokenize", {"tokens": ids})["content"]
            cases.append({"request": case, "tokens": pieces, "detokenized": content})
    finally:
        proc.terminate()
        proc.wait()
    golden = {
        "made_by": "bench/llama_server_tokenize_golden.py (llama.cpp 0c1e570 llama-server)",
        "model": os.path.basename(args.model),
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
