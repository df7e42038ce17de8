"""The timing channel of issue 38, measured as a tenant would try it: what
one principal's requests do to another's decode speed through the
training-free drafter's memory of recent requests (bench/draft_isolation.sh
starts the servers).

On one server, with principals alice and bob:
  bob asks 4 questions nobody asked            -> bob_cold
  alice asks 4 other questions                 -> alice_first
  bob asks alice's exact 4 questions           -> bob_on_alices
  alice repeats her own 4 questions            -> alice_repeat
Each is the median decode speed (tokens after the first over the time
between the first and the last streamed token) of greedy chat replies.
Where the drafter's memory follows the principal, bob_on_alices is bob's
cold speed; where it is shared, it is alice's repeat speed. Standard
library only."""
import argparse
import json
import statistics
import sys
import time

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from openai_stream import stream_chat  # noqa: E402


def ask(port, principal, prompt, max_tokens):
    headers = {"Authorization": f"Bearer tok-{principal}"} if principal else {}
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0}
    r = stream_chat(port, body, headers)
    decode = (r["tokens"] - 1) / (r["last"] - r["first"]) if r["tokens"] > 1 else None
    return {"decode_tok_s": decode, "tokens": r["tokens"], "text": r["text"]}


def drafted_from_recent(metrics_port):
    """The scheduler's recent-requests draft tokens so far."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
    total = 0.0
    for line in text.splitlines():
        if (line.startswith("specline_spec_decode_num_draft_tokens_by_source_total{")
                and 'source="recent_requests"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def run(args):
    prompts = [json.loads(l) for l in open(args.prompts)]
    open_prompts = [p["prompt"] for p in prompts if p["class"] == "open"][:8]
    if len(open_prompts) < 8:
        sys.exit("need 8 open prompts")
    bobs, alices = open_prompts[:4], open_prompts[4:]
    alice, bob = ("alice", "bob") if args.auth else ("", "")
    steps = [("bob_cold", bob, bobs), ("alice_first", alice, alices),
             ("bob_on_alices", bob, alices), ("alice_repeat", alice, alices)]
    out = {"config": args.config, "steps": {}}
    for name, who, qs in steps:
        before = drafted_from_recent(args.metrics_port)
        replies = [ask(args.port, who, q, args.max_tokens) for q in qs]
        out["steps"][name] = {
            "median_decode_tok_s": statistics.median(r["decode_tok_s"] for r in replies),
            "recent_draft_tokens": drafted_from_recent(args.metrics_port) - before,
            "tokens": [r["tokens"] for r in replies],
            "texts": [r["text"] for r in replies]}
        print(f"{args.config:>7} {name:>14}: {out['steps'][name]['median_decode_tok_s']:7.1f} tok/s, "
              f"{out['steps'][name]['recent_draft_tokens']:6.0f} draft tokens from recent requests",
              file=sys.stderr)
    with open(args.json, "w") as f:
        json.dump(out, f)


def report(args):
    cells = [json.load(open(p)) for p in args.cells]
    by = {}
    for c in cells:  # rounds (fresh servers) of one config are pooled
        by.setdefault(c["config"], []).append(c)
    rows = []
    print(f"{'config':>7} {'rounds':>6} {'bob cold':>9} {'alice 1st':>9} {'bob on alice':>12} "
          f"{'alice rep':>9} {'bob/alice 1st':>13} {'rep/alice 1st':>13} {'recent drafts':>13}")
    for config, cs in by.items():
        speed = lambda c, k: c["steps"][k]["median_decode_tok_s"]
        med = lambda k: statistics.median(speed(c, k) for c in cs)
        # Both ratios are on the same four prompts, in one server: bob's
        # first asking of alice's questions, and alice's repeat, against
        # alice's first asking.
        leak = statistics.median(speed(c, "bob_on_alices") / speed(c, "alice_first") for c in cs)
        works = statistics.median(speed(c, "alice_repeat") / speed(c, "alice_first") for c in cs)
        recent = statistics.median(c["steps"]["bob_on_alices"]["recent_draft_tokens"] for c in cs)
        row = {"config": config, "rounds": len(cs),
               **{f"{k}_tok_s": med(k) for k in cs[0]["steps"]},
               "bob_on_alices_vs_alice_first": leak, "alice_repeat_vs_alice_first": works,
               "bob_on_alices_recent_draft_tokens": recent,
               "replies_equal": all(c["steps"]["bob_on_alices"]["texts"] ==
                                    c["steps"]["alice_first"]["texts"] for c in cs)}
        rows.append(row)
        print(f"{config:>7} {len(cs):>6} {med('bob_cold'):>9.1f} {med('alice_first'):>9.1f} "
              f"{med('bob_on_alices'):>12.1f} {med('alice_repeat'):>9.1f} {leak:>13.2f} "
              f"{works:>13.2f} {recent:>13.0f}")
    with open(args.out, "w") as f:
        json.dump({"command": args.command, "date": time.strftime("%Y-%m-%d"),
                   "model": args.model, "rows": rows}, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--metrics-port", type=int, required=True)
    r.add_argument("--config", required=True)
    r.add_argument("--auth", action="store_true", help="principals alice and bob (tok-NAME)")
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
