#!/usr/bin/python3
"""Greedy agreement with llama.cpp on the same quantized files.

For each file (SmolLM2-135M requantized by llama-quantize to Q4_K_M, Q5_K_M,
Q6_K and Q8_0 by default), greedy-decodes up to 32 tokens (stopping at end of generation) from 5 prompts with
llama-server (/completion, temperature 0, n_probs 2) and with
`specline generate --show-ids`, and reports where the two first differ. At a
difference it prints llama.cpp's top-2 log-probability margin there: both
engines quantize activations to 8 bits (in different block sizes), so a
small margin (a near tie) explains a flip. Skips (exit 0 with a message)
when the peer is absent; builds nothing.

usage: peer_greedy.py --specline build/specline --peer DIR [--files F ...]
                      [--json bench/results/peer_greedy.json]
"""
import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.request

PROMPTS = [
    "The capital of France is",
    "Once upon a time, a little robot",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def peer_greedy(peer, model, n):
    port = free_port()
    srv = subprocess.Popen([os.path.join(peer, "llama-server"), "-m", model, "--port", str(port),
                            "-t", "2", "-c", "1024", "-np", "1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(base + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        out = []
        for p in PROMPTS:
            r = post(base + "/completion", {"prompt": p, "n_predict": n, "temperature": 0,
                                            "top_k": 1, "n_probs": 2, "cache_prompt": False,
                                            "return_tokens": True})
            margins = []
            for step in r.get("completion_probabilities", []):
                top = step.get("top_logprobs") or step.get("top_probs") or []
                if len(top) >= 2:
                    a, b = top[0], top[1]
                    la = a["logprob"] if "logprob" in a else math.log(max(a["prob"], 1e-30))
                    lb = b["logprob"] if "logprob" in b else math.log(max(b["prob"], 1e-30))
                    margins.append(la - lb)
                else:
                    margins.append(None)
            out.append({"tokens": r["tokens"], "margins": margins})
        return out
    finally:
        srv.terminate()
        srv.wait()


def specline_greedy(binary, model, n):
    out = []
    for p in PROMPTS:
        r = subprocess.run([binary, "generate", "--model", model, "--prompt", p, "--max-tokens",
                            str(n), "--threads", "2", "--show-ids"],
                           capture_output=True, text=True, check=True)
        # --show-ids: the last stderr line is the generated ids, space-separated.
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        out.append([int(t) for t in lines[-1].split()] if lines else [])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--specline", required=True)
    ap.add_argument("--peer", required=True)
    ap.add_argument("--files", nargs="*", default=[])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--json", default="bench/results/peer_greedy.json")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.peer, "llama-server")):
        print(f"skipped: no llama-server in {a.peer}")
        return 0
    rows = []
    # Both stop at end-of-generation tokens, as a user's request would (with
    # ignore_eos llama.cpp bans them outright while specline only keeps going).
    print(f"{'file':36} {'prompt':34} {'agree':>5} {'margin at split':>16}")
    for f in a.files:
        peer = peer_greedy(a.peer, f, a.tokens)
        ours = specline_greedy(a.specline, f, a.tokens)
        for prompt, p, o in zip(PROMPTS, peer, ours):
            n = 0
            while n < min(len(p["tokens"]), len(o)) and p["tokens"][n] == o[n]:
                n += 1
            same = p["tokens"] == o  # both ran to the limit or stopped at the same EOS
            margin = None if same or n >= len(p["margins"]) else p["margins"][n]
            rows.append({"file": os.path.basename(f), "prompt": prompt, "agree_tokens": n,
                         "identical": same, "peer_top2_logprob_margin_at_split": margin,
                         "peer": p["tokens"], "specline": o})
            m = "-" if same else (f"{margin:.3f}" if margin is not None else "?")
            print(f"{os.path.basename(f):36} {prompt[:34]:34} {n:>5} {m:>16}")
    os.makedirs(os.path.dirname(a.json) or ".", exist_ok=True)
    with open(a.json, "w") as fh:
        json.dump({"bench": "peer_greedy", "date": time.strftime("%Y-%m-%d"), "rows": rows}, fh,
                  indent=1)
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
