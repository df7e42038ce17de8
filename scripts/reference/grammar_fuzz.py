#!/usr/bin/env python3
"""Fuzz check of structured output (model/grammar): random JSON Schemas,
constrained random walks through each (build/.../grammar_walk, one process
for all), and every output validated with the `jsonschema` package.

The schemas nest objects and arrays (minItems/maxItems), mix required and
optional properties, enums and consts of every JSON type, strings with
patterns and length bounds, integers and numbers with bounds, booleans,
nulls and anyOf. A walk draws random tokens among those the grammar's mask
allows until the grammar ends (the stop token) or a per-walk token limit
is hit. A walk that hits the limit ends unchecked (its output is not a
whole document), so only a small share may: more than --max-at-limit (2%)
of the walks fails the check, since the fuzz would then check little.
Fails when any output does not parse or validate, when a mask and Accept
disagree, when a valid schema does not compile, when too many walks end at
the limit, or when the walker crashes or runs past --timeout (a hang).

Run from the repository root (scripts/test.sh's `python` phase runs it):
  python3 scripts/reference/grammar_fuzz.py --bin build/model/grammar/grammar_walk
      [--tokenizer PATH] [--schemas 1000] [--seed 28] [--max-tokens 1024]
      [--max-at-limit 0.02] [--show 3]
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

try:
    import jsonschema
except ImportError:
    sys.exit("grammar_fuzz: needs the jsonschema package (training/requirements-venv.txt)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TOKENIZER = os.path.join(os.path.expanduser("~"), ".cache", "specline", "models",
                                 "SmolLM2-135M-Instruct.Q4_1.gguf")

WORDS = ["id", "name", "title", "city", "count", "tags", "items", "price", "ok", "kind", "user",
         "address", "zip", "score", "notes", "meta", "values", "child", "level", "email", "é_ü",
         "with space", "quote\"d", "back\\slash", "emoji😀"]
PATTERNS = [r"^[a-z]{2,6}$", r"^[A-Z][a-z]+$", r"^\d{3}-\d{4}$", r"^(foo|bar)+$", r"^[a-f0-9]{8}$",
            r"^v[0-9]+\.[0-9]+$", r"^[A-Za-z ]{1,10}$", r"^\w+@\w+\.com$"]
STRINGS = ["red", "green", "blue", "a b", "", "ünï", "x\"y", "line\nbreak", "😀"]


def scalar_schema(rng):
    kind = rng.choice(["string", "pattern", "bounded_string", "integer", "bounded_integer",
                       "number", "bounded_number", "boolean", "null", "enum", "const"])
    if kind == "string":
        return {"type": "string"}
    if kind == "pattern":
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    if kind == "bounded_string":
        lo = rng.randint(0, 4)
        return {"type": "string", "minLength": lo, "maxLength": lo + rng.randint(0, 6)}
    if kind == "integer":
        return {"type": "integer"}
    if kind == "bounded_integer":
        lo = rng.randint(-1000, 1000)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 500)}
    if kind == "number":
        return {"type": "number"}
    if kind == "bounded_number":
        lo = rng.randint(-100, 100)
        return {"type": "number", "minimum": lo, "maximum": lo + rng.randint(1, 100)}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "null":
        return {"type": "null"}
    values = [rng.choice(STRINGS), rng.randint(-50, 50), rng.choice([True, False, None]),
              round(rng.uniform(-10, 10), 2)]
    if kind == "enum":
        enum = rng.sample(values + STRINGS, rng.randint(1, 5))
        # jsonschema compares 1 and True as different, JSON too; keep them apart.
        return {"enum": list({json.dumps(v): v for v in enum}.values())}
    return {"const": rng.choice(values)}


def schema(rng, depth):
    roll = rng.random()
    if depth > 0 and roll < 0.35:
        return object_schema(rng, depth - 1)
    if depth > 0 and roll < 0.6:
        lo = rng.randint(0, 2)
        s = {"type": "array", "items": schema(rng, depth - 1)}
        if rng.random() < 0.7:
            s["minItems"] = lo
        if rng.random() < 0.7:
            s["maxItems"] = lo + rng.randint(0, 3)
        return s
    if depth > 0 and roll < 0.67:
        return {"anyOf": [schema(rng, depth - 1) for _ in range(rng.randint(2, 3))]}
    return scalar_schema(rng)


def object_schema(rng, depth):
    names = rng.sample(WORDS, rng.randint(1, 5))
    s = {"type": "object", "properties": {n: schema(rng, depth) for n in names}}
    required = [n for n in names if rng.random() < 0.6]
    if required:
        s["required"] = required
    if rng.random() < 0.5:
        s["additionalProperties"] = False
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "model", "grammar", "grammar_walk"))
    ap.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
    ap.add_argument("--schemas", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--max-at-limit", type=float, default=0.02,
                    help="the largest share of walks that may end at --max-tokens unchecked")
    ap.add_argument("--timeout", type=int, default=600, help="seconds for the whole batch (a hang)")
    ap.add_argument("--show", type=int, default=3)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    schemas = [object_schema(rng, rng.randint(0, 3)) for _ in range(args.schemas)]
    stdin = "".join(json.dumps({"format": {"json_schema": s}, "seed": args.seed + i,
                                "max_tokens": args.max_tokens}) + "\n"
                    for i, s in enumerate(schemas))
    start = time.time()
    try:
        proc = subprocess.run([args.bin, "--tokenizer", args.tokenizer], input=stdin.encode("utf-8"),
                              capture_output=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        sys.exit(f"grammar_fuzz: {args.bin} ran past {args.timeout} s (a hang)")
    if proc.returncode != 0:
        sys.exit(f"grammar_fuzz: {args.bin} exited {proc.returncode}: "
                 f"{proc.stderr.decode(errors='replace')[-2000:]}")
    answers = [json.loads(line) for line in proc.stdout.decode("utf-8").split("\n") if line]
    if len(answers) != len(schemas):
        sys.exit(f"grammar_fuzz: {len(schemas)} schemas sent, {len(answers)} answers")

    bad, compile_errors, at_limit, tokens, walks = [], [], [], 0, 0
    compile_ms = sum(a.get("compile_ms", 0) for a in answers)
    for s, a in zip(schemas, answers):
        if "error" in a:
            compile_errors.append((s, a["error"]))
            continue
        for out in a["outputs"]:
            walks += 1
            tokens += out["tokens"]
            if out["mismatches"]:
                bad.append((s, out.get("text", ""), "the mask allowed a token Accept refused"))
            elif not out["terminated"]:
                # Cut at the limit, possibly inside a character: not checked.
                at_limit.append((s, out.get("text", "")))
            elif "invalid_utf8_hex" in out:
                bad.append((s, bytes.fromhex(out["invalid_utf8_hex"]), "not well-formed UTF-8"))
            else:
                try:
                    jsonschema.validate(json.loads(out["text"]), s)
                except (ValueError, jsonschema.ValidationError) as e:
                    bad.append((s, out["text"], str(e).split("\n")[0]))
    elapsed = time.time() - start
    too_many_at_limit = len(at_limit) > args.max_at_limit * walks
    print(f"grammar_fuzz: {len(schemas)} schemas, {walks} walks: {walks - len(at_limit) - len(bad)} "
          f"outputs valid, {len(bad)} invalid, {len(at_limit)} at the {args.max_tokens}-token limit "
          f"(unchecked; at most {args.max_at_limit:.0%} may be), {len(compile_errors)} not compiled; "
          f"{tokens} tokens in {elapsed:.1f} s ({compile_ms / 1000:.1f} s compiling)")
    for s, text, why in bad[:args.show]:
        print(f"  INVALID: {why}\n    schema: {json.dumps(s)}\n    output: {text!r}")
    for s, text in at_limit[:args.show]:
        print(f"  AT LIMIT (unchecked): schema: {json.dumps(s)}\n    output: {text[-300:]!r}")
    for s, err in compile_errors[:args.show]:
        print(f"  NOT COMPILED: {err}\n    schema: {json.dumps(s)}")
    if too_many_at_limit:
        print(f"grammar_fuzz: {len(at_limit)} of {walks} walks ({len(at_limit) / max(walks, 1):.1%}) "
              f"ended at the token limit unchecked, more than {args.max_at_limit:.0%}", file=sys.stderr)
    if bad or compile_errors or too_many_at_limit or walks == 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
