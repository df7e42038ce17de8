"""Anthropic's official `anthropic` package against a live specline
deployment's Messages API (tests/python_client_test.cc starts it, with an
auth token file and a chat template that renders tools):

  create        greedy text equals the OpenAI chat API's for the same turn
                (the `openai` package, same server); usage counts the prompt
  stream        messages.stream's text and final message equal create's
  tools         tool_choice {"type": "any"} makes a tool_use block whose
                input is valid for the tool, streamed (the SDK assembles the
                input_json_delta pieces) and not; a tool_result turn answers
  count_tokens  equals the prompt tokens create reported
  errors        a wrong key is AuthenticationError (x-api-key), an unknown
                model NotFoundError, a bad field BadRequestError naming it

Exits non-zero with a message on the first failed check.
"""
import argparse
import sys

import anthropic
import openai

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 32},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
TURN = [{"role": "user", "content": "Write one sentence about the sea."}]


def check(cond, msg):
    if not cond:
        print(f"FAIL: {msg}", file=sys.stderr)
        sys.exit(1)


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def create_and_stream(client, oai, model):
    m = client.messages.create(model=model, max_tokens=24, temperature=0, messages=TURN,
                               system="You are brief.")
    check(m.type == "message" and m.role == "assistant", f"create: {m}")
    check(m.stop_reason in ("end_turn", "max_tokens"), f"create: stop_reason {m.stop_reason}")
    check(m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 0, f"create: usage {m.usage}")
    check(0 < m.usage.output_tokens <= 24, f"create: output_tokens {m.usage.output_tokens}")
    chat = oai.chat.completions.create(
        model=model, max_tokens=24, temperature=0,
        messages=[{"role": "system", "content": "You are brief."}] + TURN)
    check(text_of(m) == chat.choices[0].message.content,
          f"create: {text_of(m)!r} != chat {chat.choices[0].message.content!r}")
    check(m.usage.output_tokens == chat.usage.completion_tokens, "create: output_tokens != chat's")

    with client.messages.stream(model=model, max_tokens=24, temperature=0, messages=TURN,
                                system="You are brief.") as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    check(streamed == text_of(m), f"stream: {streamed!r} != {text_of(m)!r}")
    check(final.stop_reason == m.stop_reason, f"stream: stop_reason {final.stop_reason}")
    check(final.usage.output_tokens == m.usage.output_tokens, f"stream: usage {final.usage}")

    # A stop sequence is named as what stopped the answer.
    words = text_of(m).split()
    check(len(words) > 3, f"create: too short to pick a stop sequence from: {text_of(m)!r}")
    stop = " " + words[2]
    s = client.messages.create(model=model, max_tokens=24, temperature=0, messages=TURN,
                               system="You are brief.", stop_sequences=[stop])
    check(s.stop_reason == "stop_sequence" and s.stop_sequence == stop,
          f"stop_sequences: {s.stop_reason} {s.stop_sequence!r}")
    check(text_of(m).startswith(text_of(s)) and stop not in text_of(s), f"stop_sequences: {text_of(s)!r}")
    return m


def tools(client, model):
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    m = client.messages.create(model=model, max_tokens=96, temperature=0, messages=ask,
                               tools=[WEATHER_TOOL], tool_choice={"type": "any"})
    uses = [b for b in m.content if b.type == "tool_use"]
    check(m.stop_reason == "tool_use" and len(uses) >= 1, f"tools: {m}")
    use = uses[0]
    check(use.name == "get_weather", f"tools: name {use.name}")
    check(isinstance(use.input.get("city"), str) and use.input.get("unit") in ("celsius", "fahrenheit"),
          f"tools: input {use.input}")
    with client.messages.stream(model=model, max_tokens=96, temperature=0, messages=ask,
                                tools=[WEATHER_TOOL], tool_choice={"type": "any"}) as s:
        final = s.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    check(final.stop_reason == "tool_use" and streamed and streamed[0].input == use.input,
          f"tools streamed: {final}")
    # The tool's result goes back; the model answers in text.
    answer = client.messages.create(
        model=model, max_tokens=32, temperature=0, tools=[WEATHER_TOOL], tool_choice={"type": "none"},
        messages=ask + [{"role": "assistant", "content": [b.model_dump() for b in m.content]},
                        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                       "content": "18 degrees, sunny"}]}])
    check(answer.stop_reason in ("end_turn", "max_tokens") and text_of(answer), f"tool result: {answer}")


def count_tokens(client, model, created):
    n = client.messages.count_tokens(model=model, messages=TURN, system="You are brief.")
    prompt = created.usage.input_tokens + (created.usage.cache_read_input_tokens or 0)
    check(n.input_tokens == prompt, f"count_tokens: {n.input_tokens} != {prompt}")


def errors(base_url, client, model):
    bad = anthropic.Anthropic(base_url=base_url, api_key="not-a-token", max_retries=0)
    try:
        bad.messages.create(model=model, max_tokens=8, messages=TURN)
        check(False, "errors: a wrong key was accepted")
    except anthropic.AuthenticationError:
        pass
    try:
        client.messages.create(model="no-such-model", max_tokens=8, messages=TURN)
        check(False, "errors: an unknown model was served")
    except anthropic.NotFoundError:
        pass
    try:
        client.messages.create(model=model, max_tokens=8, messages=TURN, top_p=7)
        check(False, "errors: top_p 7 was accepted")
    except anthropic.BadRequestError as e:
        check("top_p" in str(e) and e.body["type"] == "error", f"errors: {e}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True, help="http://host:port (no /v1)")
    p.add_argument("--model", required=True)
    p.add_argument("--api-key", required=True)
    a = p.parse_args()
    client = anthropic.Anthropic(base_url=a.base_url, api_key=a.api_key, max_retries=0)
    oai = openai.OpenAI(base_url=a.base_url + "/v1", api_key=a.api_key, max_retries=0)
    created = create_and_stream(client, oai, a.model)
    tools(client, a.model)
    count_tokens(client, a.model, created)
    errors(a.base_url, client, a.model)
    print("anthropic package: all checks passed")


if __name__ == "__main__":
    main()
