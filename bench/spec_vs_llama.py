"""Drives one server for bench/spec_vs_llama.sh (`run`), or joins every
server's requests into the table and JSON (`report`).

`run`: every prompt of bench/prompts/spec_classes.jsonl (grounded: the reply
copies the input; open: it does not), `rounds` times; within a round each
configuration of this server answers the prompt before the next prompt, so
a drift of the machine's speed lands on all of them alike. One request at a
time, streamed chat, temperature 0. Decode tokens/s = (completion tokens -
1) / (time of the last content chunk - time of the first), on the client's
clock, the same way for both servers; completion tokens come from the usage
chunk (stream_options.include_usage), or from counting content chunks where
a server sends none (recorded per request as `tokens_from`).

Acceptance: specline's OpenAI API returns no per-request speculation
figures, so the scheduler's Prometheus counters
(specline_spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total) are
scraped after every request and the deltas are that request's (one request
at a time). llama-server's final chunk carries timings.draft_n and
draft_n_accepted, recorded as they come.

`report`: per server configuration (and specline's stage count) and prompt
class: median decode tokens/s, its ratio to the same server's plain
decoding (specline `ar` at the same stage count, llama-server without
--spec-type), the replies equal to that plain reply (same prompt and round;
greedy, so a lossless method keeps them all), acceptance, tokens per
verification; then specline's best against llama-server's best per class.
Standard library only.
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

from openai_stream import stream_chat

CLASSES = ("grounded", "open")
SPEC_COUNTERS = {
    "drafts": "specline_spec_decode_num_drafts_total",
    "draft_tokens": "specline_spec_decode_num_draft_tokens_total",
    "accepted": "specline_spec_decode_num_accepted_tokens_total",
    "flushes": "specline_spec_decode_num_flushes_total",
    # docs/metrics.md's L'acc = n N / K per request, the pipeline policies'
    # (spd) figure: their accepted drafts do not map to target steps.
    "lacc_sum": "specline_spec_decode_equivalent_acceptance_length_sum",
    "lacc_count": "specline_spec_decode_equivalent_acceptance_length_count",
}


def load_prompts(path, limit):
    """The prompts, at most `limit` per class (0 = all), grounded first."""
    prompts = [json.loads(line) for line in open(path) if line.strip()]
    out = []
    for cls in CLASSES:
        of_class = [p for p in prompts if p["class"] == cls]
        out += of_class[:limit] if limit > 0 else of_class
    return out


def read_port_file(path, timeout_s=60):
    """specline serve's port file; the gateway may answer HTTP before the
    launcher has written it."""
    deadline = time.time() + timeout_s
    while True:
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def scrape_spec(metrics_port):
    """{(counter, policy): value} from the scheduler's /metrics."""
    if not metrics_port:
        return {}
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    out = {}
    for key, name in SPEC_COUNTERS.items():
        for m in re.finditer(rf'^{name}\{{policy="([^"]*)"\}} ([0-9.e+]+)$', text, re.M):
            out[(key, m.group(1))] = float(m.group(2))
    return out


def spec_delta(before, after):
    """The counters' growth, summed over policies (one request at a time)."""
    d = {k: 0.0 for k in SPEC_COUNTERS}
    for (key, policy), v in after.items():
        d[key] += v - before.get((key, policy), 0.0)
    return {k: v if k == "lacc_sum" else int(round(v)) for k, v in d.items()}


def run(args):
    prompts = load_prompts(args.prompts, args.limit_prompts)
    configs = [c for c in args.configs.split(";") if c]
    metrics_port = read_port_file(args.port_file)["scheduler"]["metrics"] if args.port_file else None
    requests = []
    # One short request first: the server's first request pays its page
    # faults and lazy set-up (both servers start with no warm-up).
    stream_chat(args.port, {"messages": [{"role": "user", "content": "Hello"}], "temperature": 0, "max_tokens": 8})
    counters = scrape_spec(metrics_port)
    for rnd in range(args.rounds):
        for p in prompts:
            for config in configs:
                body = {"messages": [{"role": "user", "content": p["prompt"]}], "temperature": 0,
                        "max_tokens": args.max_tokens}
                if args.server == "specline" and config != "default":
                    body["policy"] = config
                rec = {"server": args.server, "stages": args.stages, "config": config,
                       "class": p["class"], "id": p["id"], "round": rnd}
                try:
                    r = stream_chat(args.port, body)
                except (urllib.error.URLError, OSError, ValueError) as e:
                    rec["error"] = str(e)
                    body_text = getattr(e, "read", lambda: b"")()
                    if body_text:
                        rec["error"] += ": " + body_text.decode(errors="replace")[:300]
                    print(f"{args.label} {config} {p['id']}: {rec['error']}", file=sys.stderr)
                    requests.append(rec)
                    continue
                span = (r["last"] - r["first"]) if r["first"] is not None else 0.0
                rec.update(tokens=r["tokens"], tokens_from=r["tokens_from"], finish=r["finish"],
                           content_chunks=r["content_chunks"], decode_s=span,
                           decode_tok_s=(r["tokens"] - 1) / span if r["tokens"] > 1 and span > 0 else None,
                           text=r["text"])
                if metrics_port:
                    now = scrape_spec(metrics_port)
                    rec["spec"] = spec_delta(counters, now)
                    counters = now
                if args.server == "llama-server" and config != "plain" and r["timings"]:
                    # Its timings leave draft_n out when nothing was drafted.
                    rec["spec"] = {"draft_tokens": r["timings"].get("draft_n", 0),
                                   "accepted": r["timings"].get("draft_n_accepted", 0)}
                requests.append(rec)
                tps = rec["decode_tok_s"]
                print(f"{args.label} r{rnd} {config:>9} {p['id']:<20} {r['tokens']:>4} tok "
                      f"{tps if tps is None else round(tps, 1)} tok/s", file=sys.stderr)
    json.dump({"label": args.label, "server": args.server, "stages": args.stages, "configs": configs,
               "requests": requests}, open(args.json, "w"), indent=1)


def median(xs):
    return statistics.median(xs) if xs else None


def ratio(a, b):
    return a / b if a is not None and b else None


def r_server(requests):
    return requests[0]["server"] if requests else None


def summarize(requests, plain):
    """Per class: median tok/s, identity with the plain replies, acceptance."""
    out = {}
    for cls in CLASSES:
        rs = [r for r in requests if r["class"] == cls]
        ok = [r for r in rs if "error" not in r]
        tps = [r["decode_tok_s"] for r in ok if r.get("decode_tok_s")]
        same = sum(1 for r in ok if plain.get((r["id"], r["round"])) == r["text"])
        s = {"median_tok_s": median(tps), "requests": len(rs), "errors": len(rs) - len(ok),
             "identical_to_plain": same, "compared": sum(1 for r in ok if (r["id"], r["round"]) in plain),
             "tokens": sum(r["tokens"] for r in ok)}
        with_spec = [r for r in ok if "spec" in r]
        if with_spec:
            spec = [r["spec"] for r in with_spec]
            drafted = sum(x.get("draft_tokens", 0) for x in spec)
            accepted = sum(x.get("accepted", 0) for x in spec)
            drafts = sum(x.get("drafts", 0) for x in spec)
            tokens = sum(r["tokens"] for r in with_spec)
            s.update(drafted=drafted, accepted=accepted,
                     acceptance=accepted / drafted if drafted else None)
            lacc_n = sum(x.get("lacc_count", 0) for x in spec)
            if lacc_n:
                s["equivalent_acceptance_length"] = sum(x.get("lacc_sum", 0) for x in spec) / lacc_n
            if drafts:
                # vLLM's mean accepted length, as `specline client` prints it
                # ("tokens per verification"): over the steps that drafted.
                s.update(drafts=drafts, tokens_per_verification=1 + accepted / drafts)
            # Tokens per target step, the steps that drafted nothing
            # included: specline's L'acc (n N / K, which for a pipeline
            # policy counts the stages' cycles); llama-server's every step
            # yields one token plus the drafts it accepted. For a chain on
            # one stage the two are the same figure.
            if "equivalent_acceptance_length" in s:
                s["tokens_per_step"] = s["equivalent_acceptance_length"]
            elif r_server(with_spec) == "llama-server" and tokens > accepted:
                s["tokens_per_step"] = tokens / (tokens - accepted)
        out[cls] = s
    return out


def fmt(x, spec="{:.1f}"):
    return "-" if x is None else spec.format(x)


def report(args):
    runs = [json.load(open(p)) for p in args.runs]
    # Each server's plain replies, by stage count, prompt and round
    # (llama-server's plain decoding is a server of its own).
    plain = {}
    for run_ in runs:
        for r in run_.get("requests", []):
            if r["config"] == ("ar" if r["server"] == "specline" else "plain") and "error" not in r:
                plain.setdefault((r["server"], r["stages"]), {})[(r["id"], r["round"])] = r["text"]
    def build_rows(keep):
        rows = []
        for run_ in runs:
            if run_.get("skipped"):
                rows.append({"server": run_["server"], "stages": run_.get("stages"),
                             "config": run_["config"], "skipped": run_["skipped"]})
                continue
            reqs = [r for r in run_["requests"] if keep(r)]
            for config in run_["configs"]:
                rows.append({"server": run_["server"], "stages": run_["stages"], "config": config,
                             "classes": summarize([r for r in reqs if r["config"] == config],
                                                  plain.get((run_["server"], run_["stages"]), {}))})
        # Ratios against the same server's plain decoding at the same stages.
        for row in rows:
            if "classes" not in row:
                continue
            base_name = "ar" if row["server"] == "specline" else "plain"
            base = next((b for b in rows if b["server"] == row["server"] and b["stages"] == row["stages"]
                         and b["config"] == base_name and "classes" in b), None)
            for cls in CLASSES:
                c = row["classes"][cls]
                c["vs_plain"] = (ratio(c["median_tok_s"], base["classes"][cls]["median_tok_s"])
                                 if base else None)
        return rows

    rows = build_rows(lambda r: True)
    # Round 1 alone: each prompt seen for the first time, before either
    # server's cross-request memory (ngram-mod's hash table, specline's
    # recent-requests index) has seen its reply; later rounds repeat it.
    first_rows = build_rows(lambda r: r["round"] == 0)

    def best_vs_best(rows):
        def best(server, stages, cls):
            cands = [r for r in rows if r["server"] == server and "classes" in r
                     and (stages is None or r["stages"] == stages) and r["classes"][cls]["median_tok_s"]]
            return max(cands, key=lambda r: r["classes"][cls]["median_tok_s"], default=None)

        bests = []
        for stages in sorted({r["stages"] for r in rows if r["server"] == "specline"}):
            for cls in CLASSES:
                ours, peer = best("specline", stages, cls), best("llama-server", None, cls)
                if ours and peer:
                    a, b = ours["classes"][cls]["median_tok_s"], peer["classes"][cls]["median_tok_s"]
                    bests.append({"stages": stages, "class": cls, "specline": ours["config"],
                                  "specline_tok_s": a, "llama_server": peer["config"],
                                  "llama_server_tok_s": b, "ratio": a / b})
        return bests

    bests = best_vs_best(rows)
    first_bests = best_vs_best(first_rows)

    def name(r):
        if r["server"] == "specline":
            return f"specline {r['stages']} stage{'s' if r['stages'] > 1 else ''} `{r['config']}`"
        return "llama-server" + ("" if r["config"] == "plain" else f" `--spec-type {r['config']}`")

    def table(title, rows):
        print(title)
        print("| server | grounded tok/s (x plain) | open tok/s (x plain) | = plain reply g / o | "
              "accepted / drafted g / o | tokens per verification g / o | tokens per step g / o |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            if "skipped" in r:
                print(f"| {name(r)} | skipped: {r['skipped']} | | | | | |")
                continue
            g, o = r["classes"]["grounded"], r["classes"]["open"]
            cell = [f"{fmt(c['median_tok_s'])} ({fmt(c['vs_plain'], '{:.2f}x')})" +
                    (f", {c['errors']} errors" if c["errors"] else "") for c in (g, o)]
            same = f"{g['identical_to_plain']}/{g['compared']} / {o['identical_to_plain']}/{o['compared']}"
            acc = " / ".join(f"{c['accepted']}/{c['drafted']}" if "drafted" in c else "-" for c in (g, o))
            tpv = " / ".join(fmt(c.get("tokens_per_verification"), "{:.2f}") for c in (g, o))
            tps = " / ".join(fmt(c.get("tokens_per_step"), "{:.2f}") for c in (g, o))
            print(f"| {name(r)} | {cell[0]} | {cell[1]} | {same} | {acc} | {tpv} | {tps} |")
        print()

    table("All rounds:", rows)
    table("Round 1 only (every prompt seen for the first time):", first_rows)
    print("| rounds | stages | class | specline's best | llama-server's best | ratio |")
    print("|---|---|---|---|---|---|")
    for which, bs in (("all", bests), ("1st", first_bests)):
        for b in bs:
            print(f"| {which} | {b['stages']} | {b['class']} | `{b['specline']}` {b['specline_tok_s']:.1f} | "
                  f"`{b['llama_server']}` {b['llama_server_tok_s']:.1f} | {b['ratio']:.2f}x |")
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or platform.machine()
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        rev = ""
    out = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": cpu,
           "cores": os.cpu_count(), "command": args.command, "model": args.model,
           "llama_cpp": args.llama_cpp, "specline_build": args.build, "git": rev,
           "settings": json.loads(args.settings) if args.settings else {},
           "rows": rows, "first_round_rows": first_rows, "best_vs_best": bests,
           "first_round_best_vs_best": first_bests,
           "requests": [r for run_ in runs for r in run_.get("requests", [])]}
    json.dump(out, open(args.out, "w"), indent=1)
    print(f"\nwrote {args.out}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--server", choices=["specline", "llama-server"], required=True)
    r.add_argument("--label", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--port-file", help="specline serve's --port-file: the scheduler's /metrics port")
    r.add_argument("--stages", type=int)
    r.add_argument("--configs", default="plain", help="';'-separated: specline policies (or `default`)")
    r.add_argument("--prompts", required=True)
    r.add_argument("--limit-prompts", type=int, default=0, help="prompts per class (0 = all)")
    r.add_argument("--rounds", type=int, default=3)
    r.add_argument("--max-tokens", type=int, default=192)
    r.add_argument("--json", required=True)
    s = sub.add_parser("report")
    s.add_argument("runs", nargs="+")
    s.add_argument("--out", required=True)
    s.add_argument("--command", default="")
    s.add_argument("--model", default="")
    s.add_argument("--llama-cpp", default="")
    s.add_argument("--build", default="")
    s.add_argument("--settings", default="")
    args = p.parse_args()
    run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    main()
