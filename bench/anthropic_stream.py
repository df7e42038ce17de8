"""Streamed requests to one server over Anthropic's Messages API
(/v1/messages) or OpenAI's chat API (/v1/chat/completions), timed by the
client: TTFT (the first text delta), TPOT (the rest of the text over the
tokens after the first) and output tokens per second over the run, at a
given concurrency. Standard library only; used by
bench/anthropic_serving.sh, which prints and writes the table.

  python3 bench/anthropic_stream.py --port P --api messages|chat
          --concurrency C --requests N --max-tokens T --model NAME --run K
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request

SUBJECTS = ["dragon", "sailor", "lighthouse keeper", "robot", "baker", "fox", "violinist", "miner",
            "gardener", "astronaut", "clockmaker", "shepherd", "painter", "pilot", "librarian", "owl"]
PLACES = ["in winter", "at sea", "on the moon", "in a desert", "in a busy market", "in an old city",
          "during a storm", "in a forest", "on a train", "under the ground"]


def prompt(i, run):
    # Each request its own prompt and subject, and each run (--run) its own
    # set: no server reuses another request's prompt, and specline's drafter
    # has not seen the stories before (it learns from recent requests).
    k = run * 101 + i
    return (f"Story {run}-{i}: write a long story about a {SUBJECTS[k % len(SUBJECTS)]} "
            f"{PLACES[(k // len(SUBJECTS)) % len(PLACES)]}, in many sentences.")


def messages_body(i, a):
    return "/v1/messages", {"model": a.model, "max_tokens": a.max_tokens, "temperature": 0,
                            "stream": True, "messages": [{"role": "user", "content": prompt(i, a.run)}]}


def chat_body(i, a):
    return "/v1/chat/completions", {"model": a.model, "max_tokens": a.max_tokens, "temperature": 0,
                                    "stream": True, "stream_options": {"include_usage": True},
                                    "messages": [{"role": "user", "content": prompt(i, a.run)}]}


def pieces(api, line, state):
    """The text of one SSE data line, and the output token count when it says."""
    if not line.startswith("data:") or line == "data: [DONE]":
        return ""
    event = json.loads(line[5:])
    if api == "messages":
        if event.get("type") == "message_delta":
            state["tokens"] = event["usage"]["output_tokens"]
        delta = event.get("delta") or {}
        return delta.get("text", "") if delta.get("type") == "text_delta" else ""
    if event.get("usage"):
        state["tokens"] = event["usage"]["completion_tokens"]
    return "".join((c.get("delta") or {}).get("content") or "" for c in event.get("choices", []))


def one(i, a, results):
    path, body = (messages_body if a.api == "messages" else chat_body)(i, a)
    req = urllib.request.Request(f"http://127.0.0.1:{a.port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "x-api-key": "unused",
                                          "anthropic-version": "2023-06-01"})
    t0 = time.perf_counter()
    first = last = None
    state = {"tokens": None}
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            if pieces(a.api, raw.decode().strip(), state):
                last = time.perf_counter()
                first = first or last
    tokens = state["tokens"] or 0
    results.append({"ttft": first - t0, "tpot": (last - first) / max(1, tokens - 1), "tokens": tokens,
                    "end": last})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--api", choices=["messages", "chat"], required=True)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--requests", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--model", default="default")
    p.add_argument("--run", type=int, default=0, help="which set of prompts")
    a = p.parse_args()
    results, next_i, lock = [], [0], threading.Lock()

    def worker():
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= a.requests:
                return
            one(i, a, results)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = max(r["end"] for r in results) - t0
    print(json.dumps({"ttft_p50_ms": 1e3 * statistics.median(r["ttft"] for r in results),
                      "tpot_p50_ms": 1e3 * statistics.median(r["tpot"] for r in results),
                      "tokens_per_s": sum(r["tokens"] for r in results) / wall,
                      "mean_tokens": statistics.mean(r["tokens"] for r in results)}))


if __name__ == "__main__":
    main()
