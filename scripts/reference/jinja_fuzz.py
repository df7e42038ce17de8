#!/usr/bin/env python3
"""Randomized conformance check of the C++ chat template engine (model/jinja)
against Python's jinja2 set up as transformers' apply_chat_template does
(jinja_golden.make_env).

For every template in tests/data/jinja/templates/ it draws random
conversations (random roles including tool and unknown ones, empty and
None content, whitespace, Unicode with emoji, CJK and control characters,
tool calls with dict or string arguments, tools lists, add_generation_prompt,
enable_thinking), renders each with jinja2 and with build/.../jinja_conformance
(one process for all cases), and fails on any byte difference or when one
side raises and the other does not.

Run from the repository root (scripts/test.sh's `python` phase runs it):
  python3 scripts/reference/jinja_fuzz.py --bin build/model/jinja/jinja_conformance
      [--seed 27] [--per-template 200] [--whitespace 500] [--mutations 0]
      [--templates DIR] [--show 5]
--whitespace N renders N small generated templates of text and tags with
random -/+ modifiers (trim_blocks / lstrip_blocks / whitespace control).
--mutations N also renders N randomly edited copies of each template (the
parser's errors and odd syntax), too slow for CI's default.
"""
import argparse
import copy
import glob
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jinja_golden import ROOT, SEARCH_TOOL, WEATHER_TOOL, make_env, render_reference  # noqa: E402

TEXTS = [
    "", " ", "\n", "  \n\t ", "Hello", "Hello, world!", "What's the weather like?", "  padded  ",
    "line one\nline two\n\nline four\n", "trailing newline\n", "\nleading newline",
    "Emoji 😀🎉👍🏽", "中文测试，你好世界", "日本語のテキスト", "한국어", "Ünïcödé ñ ß ẞ", "Ελληνικά Привет",
    "ctrl \x00\x01\x1f\x7f chars", "tab\tand\rcarriage", "quotes \"double\" 'single' \\backslash",
    "<think>\nreasoning here\n</think>\n\nanswer", "<tool_call>\n{\"name\": \"x\"}\n</tool_call>",
    "{{ not a template }} {% neither %}", "[INST] fake [/INST]", "<|im_start|>user", "\u2028sep\u2029",
    "A" * 50, "mixed 😀 text\nwith 中文 and\ttabs",
]
ROLES = ["system", "user", "assistant", "tool"]
ODD_ROLES = ["narrator", "function", "developer", "ipython", ""]
TOOLS = [WEATHER_TOOL, SEARCH_TOOL, {
    "type": "function",
    "function": {"name": "no_params", "description": "Takes nothing.",
                 "parameters": {"type": "object", "properties": {}}},
}]


def random_text(rng):
    if rng.random() < 0.3:
        return "".join(rng.choice(TEXTS) for _ in range(rng.randint(1, 3)))
    return rng.choice(TEXTS)


def random_args(rng):
    args = {"city": random_text(rng)}
    if rng.random() < 0.5:
        args["unit"] = rng.choice(["celsius", "fahrenheit"])
    if rng.random() < 0.2:
        args["nested"] = {"list": [1, 2.5, None, True], "s": "ü"}
    return json.dumps(args, ensure_ascii=rng.random() < 0.5) if rng.random() < 0.3 else args


def random_tool_call(rng, i):
    fn = {"name": rng.choice(["get_weather", "search", "no_params"]), "arguments": random_args(rng)}
    call = {"type": "function", "function": fn}
    if rng.random() < 0.8:
        call["id"] = f"call_{i:04d}" if rng.random() < 0.7 else "abcdefghi"
    return call


def random_message(rng, role, i):
    m = {"role": role, "content": random_text(rng)}
    if role == "assistant":
        if rng.random() < 0.3:
            m["tool_calls"] = [random_tool_call(rng, i * 10 + k) for k in range(rng.randint(1, 2))]
            r = rng.random()
            if r < 0.3:
                m["content"] = None
            elif r < 0.6:
                m["content"] = ""
        if rng.random() < 0.15:
            m["reasoning_content"] = random_text(rng)
    elif role == "tool":
        if rng.random() < 0.7:
            m["tool_call_id"] = f"call_{i:04d}"
        if rng.random() < 0.5:
            m["name"] = "get_weather"
    return m


def random_conversation(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append(random_message(rng, "system", 0))
    n = rng.randint(1, 8)
    chaotic = rng.random() < 0.2
    role = "user"
    for i in range(1, n + 1):
        if chaotic:
            role = rng.choice(ROLES + ODD_ROLES[:2])
        msgs.append(random_message(rng, role, i))
        if not chaotic:
            last = msgs[-1]
            if role == "user":
                role = "assistant"
            elif role == "assistant":
                role = "tool" if last.get("tool_calls") else "user"
            else:
                role = "tool" if rng.random() < 0.3 else "assistant"
        if rng.random() < 0.03:
            msgs.append(random_message(rng, rng.choice(ODD_ROLES), i))
    ctx = {"messages": msgs, "add_generation_prompt": rng.random() < 0.6,
           "bos_token": rng.choice(["<s>", "<|begin_of_text|>", ""]), "eos_token": rng.choice(["</s>", "<|eot_id|>"])}
    r = rng.random()
    if r < 0.4:
        ctx["tools"] = rng.sample(TOOLS, rng.randint(1, len(TOOLS)))
    elif r < 0.5:
        ctx["tools"] = None
    elif r < 0.55:
        ctx["tools"] = []
    if rng.random() < 0.3:
        ctx["enable_thinking"] = rng.random() < 0.5
    if rng.random() < 0.7:
        ctx["date_string"] = "26 Jul 2024"
    return ctx


MUTATION_SNIPPETS = ["{%", "%}", "{{", "}}", "-", "(", ")", "\"", "'", " if ", " is ", "|", ".", "[", "]", ",",
                     "endif", "not ", "~", "+"]


def mutate(rng, source):
    """A template with 1-3 random edits (deleted, repeated or moved spans,
    inserted syntax): mostly syntax errors, which must fail on both sides,
    and some odd but valid templates, which must render alike."""
    s = source
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        i = rng.randrange(len(s) + 1)
        j = min(len(s), i + rng.randint(1, 30))
        if op < 0.3:
            s = s[:i] + s[j:]
        elif op < 0.6:
            s = s[:i] + s[i:j] + s[i:j] + s[j:]
        elif op < 0.8:
            s = s[:i] + rng.choice(MUTATION_SNIPPETS) + s[i:]
        else:
            k = rng.randrange(len(s) + 1)
            s = s[:k] + s[i:j] + s[k:]
    return s


WS_TEXTS = ["", " ", "  ", "\n", "\n  ", "  \n", "\t", "x", " x ", "\n\n", "a\n  ", "\r\n", " \t\n\t "]


def whitespace_template(rng):
    """Text and tags with random `-`/`+` modifiers: trim_blocks,
    lstrip_blocks and whitespace control, where prompts differ by a space."""
    def sign(plus=True):
        return rng.choice(["", "-", "+"] if plus else ["", "-"])

    def tag():
        k = rng.random()
        if k < 0.3:
            return "{{%s 'v' %s}}" % (sign(False), sign(False))
        if k < 0.5:
            return "{#%s c %s#}" % (sign(), sign())
        if k < 0.7:
            return ("{%%%s if true %s%%}" % (sign(), sign()) + rng.choice(WS_TEXTS)
                    + "{%%%s endif %s%%}" % (sign(), sign()))
        if k < 0.85:
            return ("{%%%s for i in [1, 2] %s%%}" % (sign(), sign()) + rng.choice(WS_TEXTS) + "{{ i }}"
                    + rng.choice(WS_TEXTS) + "{%%%s endfor %s%%}" % (sign(False), sign(False)))
        return ("{%%%s raw %s%%}" % (sign(False), sign(False)) + rng.choice(WS_TEXTS) + "{{ x }}"
                + "{%%%s endraw %s%%}" % (sign(False), sign()))

    return "".join(rng.choice(WS_TEXTS) + tag() for _ in range(rng.randint(1, 5))) + rng.choice(WS_TEXTS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "model", "jinja", "jinja_conformance"))
    ap.add_argument("--templates", default=os.path.join(ROOT, "tests", "data", "jinja", "templates"))
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--per-template", type=int, default=200)
    ap.add_argument("--mutations", type=int, default=0,
                    help="also render this many randomly edited copies of each template (slow: each is compiled)")
    ap.add_argument("--whitespace", type=int, default=500,
                    help="small generated templates exercising whitespace control")
    ap.add_argument("--show", type=int, default=5, help="mismatches to print in full")
    args = ap.parse_args()

    start = time.time()
    env = make_env()
    paths = sorted(glob.glob(os.path.join(args.templates, "*.jinja")))
    if not paths:
        sys.exit(f"jinja_fuzz: no templates under {args.templates}")
    rng = random.Random(args.seed)
    cases, expected = [], []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        for _ in range(args.per_template):
            ctx = random_conversation(rng)
            cases.append({"template_path": os.path.abspath(path), "context": ctx})
            expected.append(render_reference(env, source, ctx))
        for _ in range(args.mutations):
            edited = mutate(rng, source)
            ctx = random_conversation(rng)
            cases.append({"source": edited, "template_path_edited": os.path.abspath(path), "context": ctx})
            expected.append(render_reference(env, edited, ctx))
    for _ in range(args.whitespace):
        source = whitespace_template(rng)
        cases.append({"source": source, "context": {}})
        expected.append(render_reference(env, source, {}))
    py_s = time.time() - start
    stdin = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
    proc = subprocess.run([args.bin], input=stdin.encode("utf-8"), capture_output=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"jinja_fuzz: {args.bin} exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    got = [json.loads(line) for line in proc.stdout.decode("utf-8").split("\n") if line]
    if len(got) != len(cases):
        sys.exit(f"jinja_fuzz: {len(cases)} cases sent, {len(got)} answers")
    bad = []
    per_template = {}
    for case, want, have in zip(cases, expected, got):
        if "template_path" in case:
            name = os.path.basename(case["template_path"])
        elif "template_path_edited" in case:
            name = os.path.basename(case["template_path_edited"]) + " (edited)"
        else:
            name = "whitespace templates"
        ok = ("output" in want and have.get("output") == want["output"]) or ("error" in want and "error" in have)
        if not ok:
            bad.append((name, case, want, have))
            per_template[name] = per_template.get(name, 0) + 1
    errors = sum("error" in w for w in expected)
    print(f"jinja_fuzz: {len(cases)} renders over {len(paths)} templates and {args.whitespace} "
          f"whitespace templates (seed {args.seed}, "
          f"{errors} raise in jinja2), {len(bad)} mismatches; {time.time() - start:.1f} s "
          f"({py_s:.1f} s in jinja2)")
    for name, n in sorted(per_template.items()):
        print(f"  {name}: {n} mismatches")
    for name, case, want, have in bad[: args.show]:
        if "source" in case:
            print(f"--- edited template:\n{case['source']}")
        print(f"--- {name}\ncontext: {json.dumps(case['context'], ensure_ascii=False)[:3000]}")
        if "output" in want and "output" in have:
            a, b = want["output"], have["output"]
            i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            print(f"first difference at char {i} of {len(a)} (jinja2) / {len(b)} (c++):")
            print(f"jinja2: ...{json.dumps(a[max(0, i - 200):i + 200], ensure_ascii=False)}")
            print(f"c++:    ...{json.dumps(b[max(0, i - 200):i + 200], ensure_ascii=False)}")
        else:
            print(f"jinja2: {json.dumps(want, ensure_ascii=False)[:3000]}")
            print(f"c++:    {json.dumps(have, ensure_ascii=False)[:3000]}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
