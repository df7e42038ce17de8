#!/usr/bin/env python3
"""RECYCLE (training-free draft-then-verify) against plain decoding, served.

Starts `specline serve` on the default model, then for every prompt of
bench/prompts/drafting.jsonl (half input-grounded: summarise, repeat, fix,
comment, convert; half open-ended) runs one greedy chat request per policy
with `specline client`, the policies interleaved and the whole set repeated
--rounds times (the second round drafts from a Token Recycling matrix the
first one taught, as a long-running server's would be). Prints a table of
median TPOT and decode tokens/s per policy and prompt group, with
recycle / ar ratios from the same run, and writes every request to JSON.

Standard library only: runs under any python3.

  python3 bench/recycle_serving.py [--stages 1] [--threads 2] [--max-tokens 128]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATS = re.compile(
    r"(?P<n>\d+) tokens \(finish: (?P<finish>\w+)\); TTFT (?P<ttft>[\d.]+) ms, "
    r"TPOT (?P<tpot>[\d.]+) ms.*?e2e (?P<e2e>[\d.]+) ms"
    r"(?:.*?(?P<acc>\d+)/(?P<drafted>\d+) drafts accepted)?"
    r"(?:.*?(?P<tpv>[\d.]+) tokens per verification)?")


def wait_for_ports(path, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"specline serve exited with {proc.returncode}")
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            time.sleep(0.2)
    sys.exit("specline serve did not start")


def run_client(specline, addr, prompt, policy, max_tokens):
    cmd = [specline, "client", "--addr", addr, "--chat", "--prompt", prompt, "--policy", policy,
           "--max-tokens", str(max_tokens), "--temperature", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = STATS.search(out.stderr + out.stdout)
    if not m:
        sys.exit(f"cannot read the client's figures:\n{out.stderr}")
    text = out.stdout
    return {
        "tokens": int(m["n"]), "finish": m["finish"], "ttft_ms": float(m["ttft"]),
        "tpot_ms": float(m["tpot"]), "e2e_ms": float(m["e2e"]),
        "accepted": int(m["acc"] or 0), "drafted": int(m["drafted"] or 0),
        "tokens_per_verification": float(m["tpv"] or 1.0), "text": text,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specline", default=os.path.join(ROOT, "build", "specline"))
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--prompts", default=os.path.join(ROOT, "bench", "prompts", "drafting.jsonl"))
    ap.add_argument("--stages", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--policies", default="ar,recycle")
    ap.add_argument("--serve-args", default="", help="extra flags for specline serve")
    ap.add_argument("--json", default=os.path.join(ROOT, "bench", "results", "recycle_serving.json"))
    args = ap.parse_args()
    policies = args.policies.split(",")
    prompts = [json.loads(line) for line in open(args.prompts) if line.strip()]

    tmp = tempfile.mkdtemp(prefix="recycle-bench-")
    port_file = os.path.join(tmp, "ports.json")
    serve = subprocess.Popen(
        [args.specline, "serve", "--model", args.model, "--stages", str(args.stages),
         "--threads", str(args.threads), "--port", "0", "--http-port", "-1",
         "--port-file", port_file, "--log-level", "warn"] + args.serve_args.split(),
        stdout=open(os.path.join(tmp, "serve.log"), "w"), stderr=subprocess.STDOUT)
    records = []
    try:
        ports = wait_for_ports(port_file, serve)
        addr = f"127.0.0.1:{ports['gateway']['grpc']}" if "gateway" in ports else None
        if addr is None:
            sys.exit(f"no gateway port in {port_file}: {ports}")
        for rnd in range(args.rounds):
            for p in prompts:
                for policy in policies:
                    r = run_client(args.specline, addr, p["prompt"], policy, args.max_tokens)
                    r.update(round=rnd, prompt=p["name"], grounded=p["grounded"], policy=policy)
                    records.append(r)
                    print(f"round {rnd} {p['name']:>14} {policy:>8}: {r['tokens']:4d} tokens, "
                          f"TPOT {r['tpot_ms']:6.2f} ms, {r['tokens_per_verification']:.2f} "
                          f"tokens/verification", file=sys.stderr)
    finally:
        serve.terminate()
        serve.wait(timeout=60)

    # Greedy: every policy must give the same text.
    for rnd in range(args.rounds):
        for p in prompts:
            texts = {r["text"] for r in records if r["round"] == rnd and r["prompt"] == p["name"]}
            if len(texts) != 1:
                print(f"MISMATCH: round {rnd} prompt {p['name']}: policies differ", file=sys.stderr)

    def median(group, policy, key, rnd=None):
        vals = [r[key] for r in records if r["policy"] == policy and group(r)
                and (rnd is None or r["round"] == rnd)]
        return statistics.median(vals) if vals else float("nan")

    groups = {"grounded": lambda r: r["grounded"], "open": lambda r: not r["grounded"],
              "all": lambda r: True}
    rows = []
    print(f"\n{args.stages} stage(s), {args.threads} threads, greedy, max_tokens {args.max_tokens}, "
          f"{len(prompts)} prompts x {args.rounds} rounds (medians)")
    print("| prompts | round | " + " | ".join(f"{p} TPOT ms" for p in policies) +
          " | tokens/verification | recycle / ar decode speed |")
    print("|---|---|" + "---|" * len(policies) + "---|---|")
    for gname, g in groups.items():
        for rnd in list(range(args.rounds)):
            tpot = {p: median(g, p, "tpot_ms", rnd) for p in policies}
            tpv = median(g, policies[-1], "tokens_per_verification", rnd)
            ratio = tpot[policies[0]] / tpot[policies[-1]]
            rows.append({"group": gname, "round": rnd, "tpot_ms": tpot,
                         "tokens_per_verification": tpv, "speedup": ratio})
            print(f"| {gname} | {rnd} | " + " | ".join(f"{tpot[p]:.2f}" for p in policies) +
                  f" | {tpv:.2f} | {ratio:.2f} |")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"stages": args.stages, "threads": args.threads, "max_tokens": args.max_tokens,
                   "model": args.model, "summary": rows,
                   "requests": [{k: v for k, v in r.items() if k != "text"} for r in records]},
                  f, indent=1)
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
