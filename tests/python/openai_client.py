"""The official `openai` Python package against specline's OpenAI API.

Run by tests/python_client_test.cc against a live `specline serve` stack,
with the texts the gRPC API gave for the same greedy requests. Exits
non-zero with a message on the first mismatch.
"""
import argparse
import sys

import openai


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def streamed_text(stream, chat, want_usage):
    """Concatenated text, the finish reason and the usage chunk of a stream."""
    text, finish, usage, seen_usage_chunk = "", None, None, False
    for chunk in stream:
        if chunk.usage is not None:
            check(want_usage, "a usage chunk came without stream_options.include_usage")
            check(chunk.choices == [], "the usage chunk has choices: %r" % chunk.choices)
            usage, seen_usage_chunk = chunk.usage, True
            continue
        check(not seen_usage_chunk, "a chunk came after the usage chunk")
        check(len(chunk.choices) == 1, "a chunk without exactly one choice: %r" % chunk)
        choice = chunk.choices[0]
        text += (choice.delta.content or "") if chat else choice.text
        if choice.finish_reason is not None:
            check(finish is None, "two chunks with a finish reason")
            finish = choice.finish_reason
    check(finish in ("stop", "length"), "no finish reason in the stream")
    check(seen_usage_chunk == want_usage, "usage chunk: got %s, want %s" % (seen_usage_chunk, want_usage))
    return text, finish, usage


def check_usage(usage, prompt_tokens, completion_tokens, what):
    check(usage.prompt_tokens == prompt_tokens,
          "%s: prompt_tokens %d, gRPC said %d" % (what, usage.prompt_tokens, prompt_tokens))
    check(usage.completion_tokens == completion_tokens,
          "%s: completion_tokens %d, gRPC said %d" % (what, usage.completion_tokens, completion_tokens))
    check(usage.total_tokens == prompt_tokens + completion_tokens, "%s: total_tokens" % what)


def expect_error(kind, param, call):
    try:
        call()
    except kind as e:
        body = e.body if isinstance(e.body, dict) else {}
        check(body.get("param") == param or param in str(e),
              "%s does not name %r: %s" % (kind.__name__, param, e))
        return
    except openai.APIError as e:
        fail("expected %s naming %r, got %s: %s" % (kind.__name__, param, type(e).__name__, e))
    fail("expected %s naming %r, the call succeeded" % (kind.__name__, param))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--expect-text-file", required=True)
    ap.add_argument("--expect-prompt-tokens", type=int, required=True)
    ap.add_argument("--expect-completion-tokens", type=int, required=True)
    ap.add_argument("--expect-logprobs-file", required=True)
    ap.add_argument("--chat-prompt")
    ap.add_argument("--expect-chat-file")
    ap.add_argument("--expect-chat-prompt-tokens", type=int)
    ap.add_argument("--expect-chat-completion-tokens", type=int)
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key="unused", max_retries=0, timeout=120)

    models = client.models.list()
    check([m.id for m in models.data] == [a.model], "models: %r" % [m.id for m in models.data])

    want = read(a.expect_text_file)
    common = dict(model=a.model, prompt=a.prompt, max_tokens=a.max_tokens, temperature=0)
    whole = client.completions.create(**common)
    check(whole.choices[0].text == want, "completion %r != gRPC %r" % (whole.choices[0].text, want))
    check_usage(whole.usage, a.expect_prompt_tokens, a.expect_completion_tokens, "completion")
    text, _, _ = streamed_text(client.completions.create(stream=True, **common), False, False)
    check(text == want, "streamed completion %r != gRPC %r" % (text, want))
    text, _, usage = streamed_text(
        client.completions.create(stream=True, stream_options={"include_usage": True}, **common),
        False, True)
    check(text == want, "streamed completion (usage) %r != gRPC %r" % (text, want))
    check_usage(usage, a.expect_prompt_tokens, a.expect_completion_tokens, "streamed usage")

    # logprobs: the gRPC API's values; the greedy token is the most likely.
    want_lp = [float(v) for v in read(a.expect_logprobs_file).split()]
    lp = client.completions.create(logprobs=3, **common).choices[0].logprobs
    check(len(lp.token_logprobs) == len(want_lp),
          "logprobs: %d values, gRPC gave %d" % (len(lp.token_logprobs), len(want_lp)))
    for i, (got, exp) in enumerate(zip(lp.token_logprobs, want_lp)):
        check(abs(got - exp) <= 1e-6 * max(1.0, abs(exp)), "logprob %d: %r != gRPC %r" % (i, got, exp))
        check(max(lp.top_logprobs[i].values()) == got, "logprob %d: the greedy token is not the top" % i)

    if a.chat_prompt:
        want_chat = read(a.expect_chat_file)
        chat = dict(model=a.model, messages=[{"role": "user", "content": a.chat_prompt}],
                    max_completion_tokens=a.max_tokens, temperature=0)
        r = client.chat.completions.create(**chat)
        check(r.choices[0].message.role == "assistant", "chat role")
        check(r.choices[0].message.content == want_chat,
              "chat %r != gRPC %r" % (r.choices[0].message.content, want_chat))
        check_usage(r.usage, a.expect_chat_prompt_tokens, a.expect_chat_completion_tokens, "chat")
        r = client.chat.completions.create(logprobs=True, top_logprobs=3, **chat)
        check(r.choices[0].message.content == want_chat, "chat with logprobs changed the text")
        for e in r.choices[0].logprobs.content:
            check(e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob,
                  "chat logprobs: top-1 %r is not the greedy token %r" % (e.top_logprobs[0], e.token))
        text, _, usage = streamed_text(
            client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **chat),
            True, True)
        check(text == want_chat, "streamed chat %r != gRPC %r" % (text, want_chat))
        check_usage(usage, a.expect_chat_prompt_tokens, a.expect_chat_completion_tokens, "chat usage")

    expect_error(openai.BadRequestError, "top_p",
                 lambda: client.completions.create(model=a.model, prompt="x", top_p=1.5))
    expect_error(openai.BadRequestError, "n",
                 lambda: client.completions.create(model=a.model, prompt="x", n=17))

    # n = 3: three choices, the prompt counted once.
    three = client.completions.create(n=3, seed=1, **dict(common, temperature=1))
    check(sorted(c.index for c in three.choices) == [0, 1, 2], "n=3: %r" % three.choices)
    check(three.usage.prompt_tokens == a.expect_prompt_tokens,
          "n=3: prompt_tokens %d, want %d once" % (three.usage.prompt_tokens, a.expect_prompt_tokens))
    check(3 <= three.usage.completion_tokens <= 3 * a.max_tokens,
          "n=3: completion_tokens %d" % three.usage.completion_tokens)
    check(three.system_fingerprint and three.system_fingerprint.startswith("fp_specline-"),
          "system_fingerprint: %r" % three.system_fingerprint)
    check(client.models.retrieve(a.model).id == a.model, "models.retrieve")
    expect_error(openai.NotFoundError, "model", lambda: client.models.retrieve("no-such-model"))
    if a.chat_prompt:
        resp = client.responses.create(model=a.model, input=a.chat_prompt,
                                       max_output_tokens=a.max_tokens, temperature=0)
        check(resp.output_text == want_chat, "responses %r != gRPC %r" % (resp.output_text, want_chat))
        check(resp.usage.input_tokens == a.expect_chat_prompt_tokens, "responses: input_tokens")
        text = ""
        for event in client.responses.create(model=a.model, input=a.chat_prompt, stream=True,
                                             max_output_tokens=a.max_tokens, temperature=0):
            if event.type == "response.output_text.delta":
                text += event.delta
        check(text == want_chat, "streamed responses %r != gRPC %r" % (text, want_chat))
    expect_error(openai.BadRequestError, "frequency_penalty",
                 lambda: client.completions.create(model=a.model, prompt="x", frequency_penalty=2.5))
    expect_error(openai.BadRequestError, "logprobs",
                 lambda: client.completions.create(model=a.model, prompt="x", logprobs=21))
    expect_error(openai.NotFoundError, "model",
                 lambda: client.completions.create(model="no-such-model", prompt="x"))
    print("openai %s: all checks passed" % openai.__version__)


if __name__ == "__main__":
    main()
