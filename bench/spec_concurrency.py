"""Speculation under concurrent load (issue 29): does the default policy
(recycle) stay at least as fast as plain decoding when several streams share
the batch? Each cell is one fresh `specline serve` whose --default-policy is
the configuration, answering every prompt of the file once with `streams`
requests in flight (greedy streamed chat, requests name no policy). Reports
per cell the aggregate decode throughput (completion tokens over the wall
time of the whole cell), the median per-request decode tokens/s and TTFT,
and how many replies equal `ar`'s at the same concurrency.

  /usr/bin/python3 bench/spec_concurrency.py run --port P --config ar --streams 4 ... --json cell.json
  /usr/bin/python3 bench/spec_concurrency.py report cell1.json ... --out results.json
"""
import argparse
import concurrent.futures
import json
import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from openai_stream import stream_chat  # noqa: E402


def load_prompts(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run(args):
    prompts = load_prompts(args.prompts)

    def one(p):
        body = {"messages": [{"role": "user", "content": p["prompt"]}],
                "max_tokens": args.max_tokens, "temperature": 0}
        sent = time.perf_counter()
        r = stream_chat(args.port, body)
        decode_s = (r["last"] - r["first"]) if r["first"] and r["last"] else 0
        return {"id": p["id"], "class": p["class"], "tokens": r["tokens"], "text": r["text"],
                "ttft_s": (r["first"] - sent) if r["first"] else None,
                "decode_tok_s": (r["tokens"] - 1) / decode_s if decode_s > 0 else None}

    # One short request first: the server's first request pays its page
    # faults and lazy set-up.
    stream_chat(args.port, {"messages": [{"role": "user", "content": "Hello"}], "temperature": 0,
                            "max_tokens": 8})
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.streams) as pool:
        requests = list(pool.map(one, prompts))
    wall = time.perf_counter() - start
    cell = {"config": args.config, "streams": args.streams, "stages": args.stages,
            "wall_s": wall, "tokens": sum(r["tokens"] for r in requests), "requests": requests}
    with open(args.json, "w") as f:
        json.dump(cell, f, indent=1)
    print(f"  {args.config:8s} streams {args.streams}: {cell['tokens'] / wall:.1f} tok/s aggregate",
          file=sys.stderr)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def report(args):
    cells = [json.load(open(p)) for p in args.cells]
    by = {}
    for c in cells:  # repeats of a cell (rounds) are pooled
        by.setdefault((c["stages"], c["streams"], c["config"]), []).append(c)
    rows = []
    for (stages, streams, config), cs in sorted(by.items()):
        reqs = [r for c in cs for r in c["requests"]]
        aggregate = [c["tokens"] / c["wall_s"] for c in cs]
        plain = by.get((stages, streams, "ar"), [])
        plain_text = {r["id"]: r["text"] for c in plain for r in c["requests"]}
        rows.append({"stages": stages, "streams": streams, "config": config, "rounds": len(cs),
                     "aggregate_tok_s": median(aggregate),
                     "request_decode_tok_s": median([r["decode_tok_s"] for r in reqs]),
                     "ttft_s": median([r["ttft_s"] for r in reqs]),
                     "same_as_ar": sum(plain_text.get(r["id"]) == r["text"] for r in reqs),
                     "replies": len(reqs)})
    base = {(r["stages"], r["streams"]): r for r in rows if r["config"] == "ar"}
    print(f"{'stages':>6} {'streams':>7} {'config':>8} {'agg tok/s':>10} {'x ar':>6} "
          f"{'req tok/s':>10} {'x ar':>6} {'TTFT ms':>8} {'= ar':>7}")
    for r in rows:
        b = base.get((r["stages"], r["streams"]))
        r["aggregate_vs_ar"] = r["aggregate_tok_s"] / b["aggregate_tok_s"] if b else None
        r["request_vs_ar"] = (r["request_decode_tok_s"] / b["request_decode_tok_s"]
                              if b and r["request_decode_tok_s"] else None)
        print(f"{r['stages']:>6} {r['streams']:>7} {r['config']:>8} {r['aggregate_tok_s']:>10.1f} "
              f"{r['aggregate_vs_ar'] or 0:>6.2f} {r['request_decode_tok_s'] or 0:>10.1f} "
              f"{r['request_vs_ar'] or 0:>6.2f} {1000 * (r['ttft_s'] or 0):>8.0f} "
              f"{r['same_as_ar']:>3}/{r['replies']:<3}")
    out = {"command": args.command, "date": time.strftime("%Y-%m-%d"), "model": args.model,
           "rows": rows}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--config", required=True)
    r.add_argument("--streams", type=int, required=True)
    r.add_argument("--stages", type=int, default=1)
    r.add_argument("--prompts", required=True)
    r.add_argument("--max-tokens", type=int, default=128)
    r.add_argument("--json", required=True)
    p = sub.add_parser("report")
    p.add_argument("cells", nargs="+")
    p.add_argument("--out", required=True)
    p.add_argument("--command", default="")
    p.add_argument("--model", default="")
    args = ap.parse_args()
    run(args) if args.verb == "run" else report(args)


if __name__ == "__main__":
    main()
