"""Drives one OpenAI-compatible server for bench/structured_output.sh, or
(--report) joins two servers' results into the table and JSON.

Every prompt is sent `repeats` times per configuration, in rounds that
interleave the configurations, one request at a time, streamed, greedy;
TPOT = (time of the last content chunk - time of the first) / (completion
tokens - 1), from the client's clock, the same way for both servers. Configurations:
  free        unconstrained, ignore_eos, max_tokens = the JSON run's length
  json        the JSON schema (OpenAI response_format), plain decoding
  json+spec   the same with specline's recycle policy (specline only)
The JSON runs also check that the output validates against the schema.
"""
import argparse
import json
import platform
import statistics
import sys
import time

from openai_stream import stream_chat

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 24},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16},
                    "minItems": 1, "maxItems": 3},
        "employed": {"type": "boolean"},
    },
    "required": ["name", "age", "city", "hobbies", "employed"],
    "additionalProperties": False,
}
PROMPTS = [
    "Describe a fictional person who lives by the sea.",
    "Invent a character for a detective novel.",
    "Give me the profile of a retired teacher.",
    "Describe a young programmer from Berlin.",
]


def validate(text):
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    value = json.loads(text)
    if jsonschema:
        jsonschema.validate(value, SCHEMA)
    else:
        assert set(SCHEMA["required"]) <= set(value), text


def run(args):
    configs = {"json": {"response_format": {"type": "json_schema",
                                            "json_schema": {"name": "person", "schema": SCHEMA}}}}
    if args.server == "specline":
        configs["json"]["policy"] = "ar"
        configs["json+spec"] = dict(configs["json"], policy="recycle")
    names = ["json"] + [c for c in configs if c != "json"] + ["free"]
    tpots = {n: [] for n in names}
    valid = {n: 0 for n in names}
    total = {n: 0 for n in names}
    lengths = {}
    # Rounds interleave the configurations, so a drift of the machine's speed
    # lands on all of them alike; "free" follows "json" within a round
    # because it reuses the JSON reply's length.
    for rep in range(args.repeats):
        for name in names:
            for i, prompt in enumerate(PROMPTS):
                body = {"messages": [{"role": "user", "content": prompt}], "temperature": 0,
                        "max_tokens": 200}
                if name == "free":
                    body.update(max_tokens=lengths.get(i, 100), ignore_eos=True)
                    if args.server == "specline":
                        body["policy"] = "ar"
                else:
                    body.update(configs[name])
                got = stream_chat(args.port, body)
                first, last, text, tokens = got["first"], got["last"], got["text"], got["tokens"]
                if name == "json":
                    lengths[i] = max(tokens, 8)
                if name != "free":
                    total[name] += 1
                    try:
                        validate(text)
                        valid[name] += 1
                    except Exception as e:  # noqa: BLE001 - reported, not fatal
                        print(f"{args.server} {name}: invalid output {text!r}: {e}", file=sys.stderr)
                if tokens > 1 and first is not None and last > first:
                    tpots[name].append((last - first) / (tokens - 1))
    results = {}
    for name in names:
        results[name] = {"tpot_ms_median": 1e3 * statistics.median(tpots[name]),
                         "requests": len(tpots[name])}
        if name != "free":
            results[name]["valid"] = f"{valid[name]}/{total[name]}"
        print(f"{args.server} {name}: TPOT {results[name]['tpot_ms_median']:.2f} ms", file=sys.stderr)
    json.dump({"server": args.server, "results": results}, open(args.json, "w"), indent=1)


def report(args):
    ours, peer = (json.load(open(p))["results"] for p in args.report)
    rows = []

    def row(what, a, b):
        rows.append({"what": what, "a_ms": a, "b_ms": b, "ratio": a / b})
        print(f"| {what} | {a:.2f} | {b:.2f} | {a / b:.3f} |")

    print("| comparison | TPOT a (ms) | TPOT b (ms) | a / b |")
    print("|---|---|---|---|")
    row("specline: JSON schema / free text", ours["json"]["tpot_ms_median"], ours["free"]["tpot_ms_median"])
    row("specline: JSON schema + recycle / free-text AR", ours["json+spec"]["tpot_ms_median"],
        ours["free"]["tpot_ms_median"])
    row("specline: JSON schema + recycle / JSON schema AR", ours["json+spec"]["tpot_ms_median"],
        ours["json"]["tpot_ms_median"])
    row("llama-server: JSON schema / free text", peer["json"]["tpot_ms_median"], peer["free"]["tpot_ms_median"])
    row("JSON schema: specline AR / llama-server", ours["json"]["tpot_ms_median"], peer["json"]["tpot_ms_median"])
    row("JSON schema: specline recycle / llama-server", ours["json+spec"]["tpot_ms_median"],
        peer["json"]["tpot_ms_median"])
    out = {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
           "model": args.model, "specline": ours, "llama_server": peer, "rows": rows}
    json.dump(out, open(args.out, "w"), indent=1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--server")
    p.add_argument("--port", type=int)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json")
    p.add_argument("--report", nargs=2)
    p.add_argument("--model", default="")
    p.add_argument("--out")
    args = p.parse_args()
    report(args) if args.report else run(args)


if __name__ == "__main__":
    main()
