#!/usr/bin/env python3
"""Multi-turn chat replay against an OpenAI API, for prefix caching (issue 18).

`run`: N conversations of M turns against one server's /v1/chat/completions,
streamed with usage. Every conversation opens with the same long system
prompt (a prefix all of them share) and every turn resends the whole history:
system, the previous user messages and the assistant replies actually
received, then a new user message. Greedy, fixed user texts, so every server
gets the same workload. C conversations run at once, each one's turns in
order. Writes one record per request (TTFT, e2e, tokens, cached tokens as the
server reports them) to JSON.

--system-prompts K gives conversation i the i mod K-th of K system prompts
(the same text with another town's library in its first sentence, so no two
share KV past it): many conversations sharing a few system prompts, the
workload a router keyed on prompt prefixes is for (bench/replicas_serving.sh).

`report`: reads the `run` files of several servers, prints one table row per
server and the ratios specline-on / llama-server and specline-on /
specline-off, and writes the summary JSON.

Standard library only: runs under any python3. bench/prefix_cache_serving.sh
starts the servers and calls both.

  python3 bench/multiturn_chat.py run --url http://127.0.0.1:8000 --label NAME --out F.json
      [--conversations 8] [--turns 4] [--concurrency 2] [--max-tokens 32]
      [--system-prompts 1]
  python3 bench/multiturn_chat.py report --out SUMMARY.json RUN.json...
"""
import argparse
import http.client
import json
import os
import queue
import statistics
import sys
import threading
import time
import urllib.parse

# ~230 tokens with SmolLM2's tokenizer: long enough that recomputing it is a
# visible share of a short turn's TTFT on 2 cores, as a real assistant's
# instructions would be.
SYSTEM_PROMPT = (
    "You are Atlas, the help desk assistant of a small public library in a coastal town. "
    "You answer questions from visitors about books, opening hours, membership, events and "
    "the town itself. Follow these rules in every answer. Be friendly, calm and brief: two "
    "or three sentences unless the visitor asks for more. Never invent a book title, an "
    "author or a date; if you are not sure, say so and suggest asking a librarian at the "
    "front desk. The library opens from nine in the morning to six in the evening on "
    "weekdays and from ten to four on Saturdays; it is closed on Sundays and public "
    "holidays. Membership is free for residents and costs twelve euros a year for "
    "visitors; a member may borrow up to eight items for three weeks and renew them twice "
    "unless someone else has reserved them. Late returns cost ten cents per item per day. "
    "The reading room on the first floor is a quiet zone, the children's corner is on the "
    "ground floor next to the garden, and the local history archive can be visited by "
    "appointment on Tuesdays and Thursdays. Events: a story hour for children every "
    "Wednesday at four, a book club on the last Friday of each month, and a computer help "
    "session on Monday mornings. When a visitor asks about something unrelated to the "
    "library, answer briefly and politely, then offer help with library matters.")

# The towns of --system-prompts' variants (the first is the original).
TOWNS = ["a coastal town", "a mountain village", "a river port", "a university city",
         "a market town", "an island harbour", "a mining valley", "a lakeside resort"]


def system_prompt(conv, variants):
    """Conversation conv's system prompt, one of `variants` texts."""
    return SYSTEM_PROMPT.replace("a coastal town", TOWNS[conv % variants], 1)


# Conversation i opens on topic i and then asks the follow-ups in order.
TOPICS = [
    "how to become a member", "the opening hours next week", "books about sailing",
    "the children's story hour", "the local history archive", "late fees for a lost week",
    "the monthly book club", "renewing a borrowed novel", "the quiet reading room",
    "computer help on Mondays", "reserving a book that is out", "the garden next to the library",
    "a good first novel for a teenager", "donating old books", "printing a document",
    "the history of the harbour"]
FOLLOW_UPS = [
    "Thanks. Can you tell me a little more about that?",
    "What should I bring with me the first time?",
    "Is there anything that costs money?",
    "Could you summarise your advice in one sentence?",
    "And what would you suggest for a rainy Saturday?",
    "One last question: who should I ask if I get lost?",
    "Great, thank you. Anything else I should know?"]


def user_message(conv, turn):
    if turn == 0:
        text = f"Hello! I would like to know about {TOPICS[conv % len(TOPICS)]}."
        if conv >= len(TOPICS):  # keep every conversation distinct past the system prompt
            text += f" (This is chat number {conv}.)"
        return text
    return FOLLOW_UPS[(turn - 1) % len(FOLLOW_UPS)]


def chat_request(url, messages, max_tokens, timeout):
    """One streamed chat request; returns its record (times in ms)."""
    u = urllib.parse.urlsplit(url)
    # Only fields both servers know: specline refuses unknown ones, and
    # omitting `model` lets either serve its own.
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    rec = {"ttft_ms": None, "e2e_ms": None, "completion_tokens": None, "prompt_tokens": None,
           "cached_tokens": None, "cached_from": None, "text": "", "error": None}
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    t0 = time.perf_counter()
    try:
        conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            rec["error"] = f"HTTP {resp.status}: {resp.read()[:300].decode(errors='replace')}"
            return rec
        parts = []
        for raw in resp:  # SSE: one `data: {...}` line per event
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if "error" in ev:
                rec["error"] = json.dumps(ev["error"])[:300]
                break
            for ch in ev.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content")
                if piece:
                    if rec["ttft_ms"] is None:
                        rec["ttft_ms"] = (time.perf_counter() - t0) * 1e3
                    parts.append(piece)
            usage = ev.get("usage")
            if usage:
                rec["completion_tokens"] = usage.get("completion_tokens")
                rec["prompt_tokens"] = usage.get("prompt_tokens")
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                if cached is not None:
                    rec["cached_tokens"], rec["cached_from"] = cached, "usage"
            # llama-server also puts `timings.cache_n` on its last chunk.
            timings = ev.get("timings")
            if timings and rec["cached_tokens"] is None and "cache_n" in timings:
                rec["cached_tokens"], rec["cached_from"] = timings["cache_n"], "timings"
        rec["e2e_ms"] = (time.perf_counter() - t0) * 1e3
        rec["text"] = "".join(parts)
    except (OSError, http.client.HTTPException, ValueError) as e:
        rec["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    return rec


def run(args):
    if not 1 <= args.system_prompts <= len(TOWNS):
        sys.exit(f"--system-prompts must be 1..{len(TOWNS)}")
    if args.warmup:  # not measured: first-touch costs (pages, threads, allocators)
        w = chat_request(args.url.split(",")[0], [{"role": "user", "content": "Say hello."}], 8, args.timeout)
        if w["error"]:
            sys.exit(f"{args.label}: warm-up failed: {w['error']}")
    # Several URLs (comma-separated): requests take them in turn, as a
    # Service spreads connections over several routers.
    urls = args.url.split(",")
    sent = [0]
    todo = queue.Queue()
    for c in range(args.conversations):
        todo.put(c)
    records, lock = [], threading.Lock()

    def worker():
        while True:
            try:
                conv = todo.get_nowait()
            except queue.Empty:
                return
            messages = [{"role": "system", "content": system_prompt(conv, args.system_prompts)}]
            for turn in range(args.turns):
                messages.append({"role": "user", "content": user_message(conv, turn)})
                start = time.perf_counter() - t_start
                with lock:
                    url = urls[sent[0] % len(urls)]
                    sent[0] += 1
                rec = chat_request(url, messages, args.max_tokens, args.timeout)
                rec.update(conversation=conv, turn=turn + 1, start_s=start,
                           history_messages=len(messages))
                with lock:
                    records.append(rec)
                if rec["error"]:
                    print(f"{args.label}: conversation {conv} turn {turn + 1}: {rec['error']}",
                          file=sys.stderr)
                    break  # the rest of this chat would resend a broken history
                messages.append({"role": "assistant", "content": rec["text"]})

    t_start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t_start
    records.sort(key=lambda r: (r["conversation"], r["turn"]))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"label": args.label, "url": args.url, "conversations": args.conversations,
                   "turns": args.turns, "concurrency": args.concurrency,
                   "max_tokens": args.max_tokens, "system_prompts": args.system_prompts,
                   "wall_s": wall, "notes": args.note,
                   "requests": records}, f, indent=1)
    ok = [r for r in records if not r["error"]]
    print(f"{args.label}: {len(ok)}/{args.conversations * args.turns} requests in {wall:.1f} s",
          file=sys.stderr)


def pct(vals, q):
    """Linear-interpolated percentile (numpy's default); None when empty."""
    vals = sorted(v for v in vals if v is not None)
    if not vals:
        return None
    k = (len(vals) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


def summarise(run_data):
    reqs = run_data["requests"]
    ok = [r for r in reqs if not r["error"]]
    later = [r for r in ok if r["turn"] >= 2]
    tokens = sum(r["completion_tokens"] or 0 for r in ok)
    cached = [r["cached_tokens"] for r in ok if r["cached_tokens"] is not None]
    prompt = [r["prompt_tokens"] for r in ok if r["prompt_tokens"] is not None]
    wall = run_data["wall_s"]
    return {
        "server": run_data["label"], "requests": len(reqs), "errors": len(reqs) - len(ok),
        "ttft_p50_ms": pct([r["ttft_ms"] for r in ok], 50),
        "ttft_p99_ms": pct([r["ttft_ms"] for r in ok], 99),
        "ttft_turn2plus_p50_ms": pct([r["ttft_ms"] for r in later], 50),
        "ttft_turn2plus_p99_ms": pct([r["ttft_ms"] for r in later], 99),
        "e2e_p50_ms": pct([r["e2e_ms"] for r in ok], 50),
        "completion_tokens": tokens, "wall_s": wall,
        "tokens_per_s": tokens / wall if wall > 0 else None,
        "requests_per_s": len(ok) / wall if wall > 0 else None,
        "mean_prompt_tokens": statistics.mean(prompt) if prompt else None,
        # None when the server reports no cached count at all.
        "mean_cached_tokens": statistics.mean(cached) if cached else None,
        # Prompt tokens served from the prefix cache, of all prompt tokens.
        "prefix_hit_rate": (sum(cached) / sum(prompt)
                            if cached and len(cached) == len(prompt) and sum(prompt) else None),
        "cached_from": sorted({r["cached_from"] for r in ok if r["cached_from"]}),
        "notes": run_data.get("notes") or "",
    }


def fmt(v, spec=".1f"):
    return "-" if v is None else format(v, spec)


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def report(args):
    runs = [json.load(open(p)) for p in args.runs]
    rows = [summarise(r) for r in runs]
    first = runs[0]
    print(f"\n{first['conversations']} conversations x {first['turns']} turns, "
          f"{first.get('system_prompts', 1)} system prompt(s), concurrency "
          f"{first['concurrency']}, max_tokens {first['max_tokens']}, greedy, streamed "
          f"(TTFT in ms; 'turns>=2' resend the history)")
    print("| server | TTFT p50 | TTFT p99 | p50 turns>=2 | p99 turns>=2 | tokens/s | requests/s "
          "| prompt tokens/req | cached tokens/req | prefix hit rate | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in rows:
        print(f"| {s['server']} | {fmt(s['ttft_p50_ms'])} | {fmt(s['ttft_p99_ms'])} | "
              f"{fmt(s['ttft_turn2plus_p50_ms'])} | {fmt(s['ttft_turn2plus_p99_ms'])} | "
              f"{fmt(s['tokens_per_s'])} | {fmt(s['requests_per_s'], '.2f')} | "
              f"{fmt(s['mean_prompt_tokens'])} | {fmt(s['mean_cached_tokens'])} | "
              f"{fmt(s['prefix_hit_rate'], '.2f')} | {s['errors']} |")
    for s in rows:
        if s["notes"]:
            print(f"note: {s['server']}: {s['notes']}")

    # Ratios from the same run: < 1 on TTFT and > 1 on tokens/s favour specline-on.
    by = {s["server"]: s for s in rows}
    keys = [("ttft_p50_ms", "TTFT p50"), ("ttft_p99_ms", "TTFT p99"),
            ("ttft_turn2plus_p50_ms", "p50 turns>=2"), ("ttft_turn2plus_p99_ms", "p99 turns>=2"),
            ("tokens_per_s", "tokens/s")]
    ratios = []
    for on, off in [("specline-on", "llama-server"), ("specline-on", "specline-off"),
                    ("specline-2stage-on", "llama-server"),
                    ("specline-2stage-on", "specline-2stage-off"),
                    # bench/replicas_serving.sh's servers
                    ("2x-cache_aware", "1x"), ("2x-round_robin", "1x"),
                    ("2x-cache_aware", "2x-round_robin"), ("1x", "llama-server"),
                    ("2x-cache_aware", "2x-llama-cache_aware")]:
        if on in by and off in by:
            ratios.append({"ratio": f"{on} / {off}",
                           **{k: ratio(by[on][k], by[off][k]) for k, _ in keys}})
    if ratios:
        print("\n| ratio | " + " | ".join(name for _, name in keys) + " |")
        print("|---|" + "---|" * len(keys))
        for r in ratios:
            print(f"| {r['ratio']} | " + " | ".join(fmt(r[k], ".2f") for k, _ in keys) + " |")
    # Greedy, so the cache must not change a word: compare the replies of
    # each cached run with its uncached twin, turn by turn.
    texts = {r["label"]: {(q["conversation"], q["turn"]): q["text"] for q in r["requests"]}
             for r in runs}
    same = {}
    for on, off in [("specline-on", "specline-off"), ("specline-2stage-on", "specline-2stage-off")]:
        if on in texts and off in texts:
            equal = sum(texts[on][k] == texts[off].get(k) for k in texts[on])
            same[f"{on} / {off}"] = [equal, len(texts[on])]
            print(f"same replies, {on} vs {off}: {equal}/{len(texts[on])}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"workload": {k: first[k] for k in
                                ("conversations", "turns", "concurrency", "max_tokens")},
                   "system_prompts": first.get("system_prompts", 1),
                   "date": time.strftime("%Y-%m-%d", time.gmtime()),
                   "servers": rows, "ratios": ratios, "same_replies": same,
                   "raw": [os.path.abspath(p) for p in args.runs]}, f, indent=1)
    print(f"\nwrote {args.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="replay the workload against one server")
    r.add_argument("--url", required=True, help="http://HOST:PORT of the OpenAI API; several, comma-separated, are taken in turn")
    r.add_argument("--label", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--conversations", type=int, default=8)
    r.add_argument("--turns", type=int, default=4)
    r.add_argument("--concurrency", type=int, default=2)
    r.add_argument("--max-tokens", type=int, default=32)
    r.add_argument("--system-prompts", type=int, default=1,
                   help="distinct system prompts the conversations share (1-8)")
    r.add_argument("--timeout", type=float, default=300)
    r.add_argument("--no-warmup", dest="warmup", action="store_false")
    r.add_argument("--note", default="", help="free text kept in the record, e.g. flags dropped")
    p = sub.add_parser("report", help="table and summary JSON from several run files")
    p.add_argument("--out", required=True)
    p.add_argument("runs", nargs="+")
    args = ap.parse_args()
    run(args) if args.cmd == "run" else report(args)


if __name__ == "__main__":
    main()
