"""One streamed OpenAI chat request, timed by the client: what the serving
benches (bench/spec_vs_llama.py, bench/structured_output.py) measure TPOT
and decode speed from, the same way for every server. Standard library
only."""
import json
import time
import urllib.request


def stream_chat(port, body, headers=None):
    """One streamed chat request: its times, text, tokens and extras.
    `headers`: more request headers (e.g. Authorization)."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    first = last = None
    text, usage_tokens, chunks, finish, timings = "", None, 0, None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("usage"):
                usage_tokens = chunk["usage"].get("completion_tokens")
            if chunk.get("timings"):
                timings = chunk["timings"]
            for c in chunk.get("choices", []):
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    text += piece
                    chunks += 1
                finish = c.get("finish_reason") or finish
    tokens = usage_tokens if usage_tokens is not None else chunks
    return {"first": first, "last": last, "text": text, "tokens": tokens,
            "tokens_from": "usage" if usage_tokens is not None else "chunks",
            "content_chunks": chunks, "finish": finish, "timings": timings}
