#!/usr/bin/env python3
"""Acceptance of a draft head in the C++ engine, on held-out prompts.

Starts `specline serve` (gateway + scheduler + stage processes) with the head,
sends each prompt with `specline client --policy ppsd|spd` greedily (T=0)
and at T=1, and sums the drafts / accepted / flushes / L'acc that the final
message of each stream reports. "per verified" = accepted / (accepted +
flushes): the acceptance rate of the drafts that were verified (drafts a
flush voided are never verified), the figure comparable with the Python
held-out acceptance that train_*.py prints. --bos-samples N decodes N
sequences from BOS instead of text prompts, the distribution of the
training and held-out data: request i's prompt is BOS and --prefix-tokens
tokens the base model samples at T=1 (PyTorch, seed i), so that greedy
requests differ too (greedy from BOS alone is one sequence). Needs a build with the serving binaries
(specline, specline-stage, specline-scheduler, specline-gateway) in --bin-dir.

  python3 training/eval_heads.py --bin-dir build --model ../shared/models/stories260K/stories260K.bin \
      --head heads/ppsd-layer-e2            # stages = ceil(n_layers / E) for PPSD
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROMPTS = ["Once upon a time", "Tom and his dog", "The little bird was sad",
                   "One day, a girl named Sue", "The sun was hot and", "Ben had a red ball"]
LINE = re.compile(r"DECODING_POLICY_(\w+): (\d+)/(\d+) drafts accepted, (\d+) flushes, L'acc ([\d.]+)")
TOKS = re.compile(r"(\d+) tokens .*?([\d.]+) tok/s decode")


def serve(bin_dir, model, head, method, stages, threads, spec_policy, log):
    pf = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    os.unlink(pf)
    flag = "--spd-head" if method == "spd" else "--ppsd-head"
    cmd = [os.path.join(bin_dir, "specline"), "serve", "--model", model, "--stages", str(stages),
           "--port", "0", "--port-file", pf, flag, head, "--threads", str(threads),
           "--spec-policy", spec_policy]
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if p.poll() is not None:
            raise RuntimeError(f"serve exited with {p.returncode}; see {log.name}")
        if os.path.exists(pf) and os.path.getsize(pf) > 0:
            try:
                with open(pf) as f:
                    port = json.load(f)["gateway"]["grpc"]
                break
            except (ValueError, KeyError):
                pass
        time.sleep(0.1)
    else:
        p.send_signal(signal.SIGINT)
        raise RuntimeError("serve did not start in 60 s")
    time.sleep(0.5)
    return p, port


def sampled_prompts(model_path, n, prefix):
    """BOS + `prefix` tokens sampled from the model at T=1, one per seed 0..n-1."""
    sys.path.insert(0, HERE)
    import torch
    from specline_train.model import load_model
    model = load_model(model_path)
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(i)
        out.append([1] + (model.generate([1], prefix, temperature=1.0, generator=g) if prefix else []))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--head", required=True)
    ap.add_argument("--stages", type=int, help="default: ceil(n_layers / E) (PPSD), spd.n_stages (SPD)")
    ap.add_argument("--prompts", help="file with one held-out prompt per line")
    ap.add_argument("--bos-samples", type=int, default=0,
                    help="decode this many sequences from BOS instead of the prompts")
    ap.add_argument("--prefix-tokens", type=int, default=3,
                    help="with --bos-samples: sampled tokens after BOS in each prompt")
    ap.add_argument("--spec-policy", default="auto", choices=["auto", "always"],
                    help="the scheduler's speculate-or-not policy (always: draft at every step)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="compute threads per process")
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args(argv)
    with open(os.path.join(a.head, "head.json")) as f:
        hj = json.load(f)
    method = hj["method"]
    stages = a.stages or (hj["spd"]["n_stages"] if method == "spd"
                          else math.ceil(hj["base"]["n_layers"] / hj["exit_layer"]))
    prompts = DEFAULT_PROMPTS
    if a.prompts:
        with open(a.prompts) as f:
            prompts = [l.rstrip("\n") for l in f if l.strip()]
    policy = "spd" if method == "spd" else "ppsd"
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    proc, port = serve(a.bin_dir, a.model, a.head, method, stages, a.threads, a.spec_policy, log)
    # (prompt flags, seed) per request
    if a.bos_samples:
        requests = [(["--prompt-ids", ",".join(map(str, p))], a.seed + i)
                    for i, p in enumerate(sampled_prompts(a.model, a.bos_samples, a.prefix_tokens))]
    else:
        requests = [(["--prompt", pr], a.seed) for pr in prompts]
    results = {}
    try:
        for t in [float(x) for x in a.temperatures.split(",")]:
            tot = {"drafts": 0, "accepted": 0, "flushes": 0, "tokens": 0, "lacc": [], "tok_s": []}
            for prompt_flags, seed in requests:
                r = subprocess.run([os.path.join(a.bin_dir, "specline"), "client", "--addr",
                                    f"127.0.0.1:{port}", *prompt_flags, "--policy", policy,
                                    "--max-tokens", str(a.max_tokens), "--temperature", str(t),
                                    "--seed", str(seed)], capture_output=True, text=True, timeout=120)
                m = LINE.search(r.stderr + r.stdout)
                if r.returncode != 0 or not m:
                    raise RuntimeError(f"client failed ({r.returncode}): {r.stderr[-500:]}")
                tot["accepted"] += int(m.group(2))
                tot["drafts"] += int(m.group(3))
                tot["flushes"] += int(m.group(4))
                tot["lacc"].append(float(m.group(5)))
                mt = TOKS.search(r.stderr + r.stdout)
                if mt:
                    tot["tokens"] += int(mt.group(1))
                    tot["tok_s"].append(float(mt.group(2)))
            res = {"requests": len(requests), "drafts": tot["drafts"], "accepted": tot["accepted"],
                   "flushes": tot["flushes"], "tokens": tot["tokens"],
                   "acceptance": tot["accepted"] / max(1, tot["drafts"]),
                   "per_verified": tot["accepted"] / max(1, tot["accepted"] + tot["flushes"]),
                   "lacc_mean": sum(tot["lacc"]) / len(tot["lacc"]),
                   "decode_tok_s_mean": sum(tot["tok_s"]) / max(1, len(tot["tok_s"]))}
            results[f"T={t:g}"] = res
            print(f"{os.path.basename(os.path.normpath(a.head))} ({method}, {stages} stages) T={t:g}: "
                  f"acceptance {res['acceptance']:.3f} ({res['accepted']}/{res['drafts']} drafts), "
                  f"flushes {res['flushes']}, per verified {res['per_verified']:.3f}, "
                  f"L'acc mean {res['lacc_mean']:.2f}, "
                  f"{res['decode_tok_s_mean']:.0f} tok/s over {len(requests)} requests", flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"head": a.head, "method": method, "stages": stages,
                       "requests": "bos" if a.bos_samples else "prompts",
                       "spec_policy": a.spec_policy, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
