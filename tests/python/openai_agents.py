"""What agent frameworks and extraction pipelines do with the official
`openai` package, against a live specline deployment
(tests/python_client_test.cc starts it):

  --parse   client.chat.completions.parse(response_format=<pydantic model>)
            returns a parsed object of that model;
  --tools   a tool-calling loop: tool_choice="required" makes a call to the
            tool (valid JSON arguments for its parameters), the tool's result
            goes back as a `tool` message, and a second turn with
            tool_choice="auto" answers.
  --responses-tools
            the same loop on the Responses API (client.responses.create):
            a function_call output item, streamed (arguments in deltas
            that concatenate to the non-streamed call's) and not, then the
            function_call_output sent back with the call.

Exits non-zero with a message on the first failed check.
"""
import argparse
import json
import sys
from typing import Literal

import openai
from pydantic import BaseModel, Field


class City(BaseModel):
    name: str = Field(max_length=24)
    country: str = Field(max_length=24)
    population_millions: int = Field(ge=0, le=100)
    climate: Literal["cold", "mild", "hot"]


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 32},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


# The Responses API's flat form of the same tool.
RESPONSES_TOOL = {"type": "function", "strict": True, **WEATHER_TOOL["function"]}


def check(cond, msg):
    if not cond:
        print(f"FAIL: {msg}", file=sys.stderr)
        sys.exit(1)


def parse(client, model):
    completion = client.chat.completions.parse(
        model=model, temperature=0, max_tokens=200,
        messages=[{"role": "user", "content": "Describe Paris as a city record."}],
        response_format=City)
    choice = completion.choices[0]
    check(choice.finish_reason == "stop", f"parse: finish_reason {choice.finish_reason}")
    check(isinstance(choice.message.parsed, City), f"parse: not a City: {choice.message.content!r}")
    print(f"parse: {choice.message.parsed!r}")


def tools(client, model):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(model=model, temperature=0, max_tokens=120,
                                           messages=messages, tools=[WEATHER_TOOL],
                                           tool_choice="required")
    choice = first.choices[0]
    check(choice.finish_reason == "tool_calls", f"required: finish_reason {choice.finish_reason}")
    calls = choice.message.tool_calls or []
    check(len(calls) >= 1, f"required: no tool call: {choice.message.content!r}")
    call = calls[0]
    check(call.function.name == "get_weather", f"required: called {call.function.name}")
    args = json.loads(call.function.arguments)
    check(set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit"),
          f"required: arguments {call.function.arguments}")
    print(f"required: get_weather({call.function.arguments}) id={call.id}")

    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id,
                     "content": json.dumps({"temperature": 21, "sky": "clear"})})
    second = client.chat.completions.create(model=model, temperature=0, max_tokens=60,
                                            messages=messages, tools=[WEATHER_TOOL],
                                            tool_choice="auto")
    answer = second.choices[0]
    check(answer.finish_reason in ("stop", "length", "tool_calls"),
          f"auto: finish_reason {answer.finish_reason}")
    check(bool(answer.message.content) or bool(answer.message.tool_calls), "auto: an empty answer")
    print(f"auto: {answer.finish_reason}: {answer.message.content!r}")


def responses_call(client, model, question):
    """One forced call, not streamed: its function_call item."""
    resp = client.responses.create(model=model, temperature=0, max_output_tokens=120, store=False,
                                   input=question, tools=[RESPONSES_TOOL], tool_choice="required")
    check(resp.status == "completed", f"responses: status {resp.status}")
    calls = [item for item in resp.output if item.type == "function_call"]
    check(len(calls) >= 1, f"responses: no function_call item: {resp.output!r}")
    call = calls[0]
    check(call.name == "get_weather" and call.call_id and call.status == "completed",
          f"responses: call {call!r}")
    args = json.loads(call.arguments)
    check(set(args) == {"city", "unit"} and args["unit"] in ("celsius", "fahrenheit"),
          f"responses: arguments {call.arguments}")
    return call


def responses_stream(client, model, question):
    """The same call streamed: its arguments as OpenAI streams them."""
    added, deltas, done, item_done, final, seen = None, [], None, None, None, []
    for event in client.responses.create(model=model, temperature=0, max_output_tokens=120, stream=True,
                                         input=question, tools=[RESPONSES_TOOL], tool_choice="required"):
        seen.append(event.type)
        if event.type == "response.output_item.added" and event.item.type == "function_call":
            added = event.item
        elif event.type == "response.function_call_arguments.delta":
            deltas.append(event.delta)
        elif event.type == "response.function_call_arguments.done":
            done = event.arguments
        elif event.type == "response.output_item.done" and event.item.type == "function_call":
            item_done = event.item
        elif event.type == "response.completed":
            final = event.response
    check(added is not None and added.arguments == "" and added.name == "get_weather",
          f"stream: output_item.added {added!r} (events: {seen})")
    check(len(deltas) > 1, f"stream: the arguments came in {len(deltas)} delta(s)")
    check("".join(deltas) == done == item_done.arguments, f"stream: deltas {deltas!r} != done {done!r}")
    calls = [item for item in final.output if item.type == "function_call"]
    check(calls and calls[0].arguments == done, f"stream: response.completed output {final.output!r}")
    return done, len(deltas)


def responses_tools(client, model):
    question = "What is the weather in Paris?"
    call = responses_call(client, model, question)
    print(f"responses: get_weather({call.arguments}) call_id={call.call_id}")
    streamed, pieces = responses_stream(client, model, question)
    check(streamed == call.arguments, f"stream: arguments {streamed!r} != not streamed {call.arguments!r}")
    print(f"responses stream: the same arguments in {pieces} deltas")

    # The call and its output sent back, as an agent loop does.
    second = client.responses.create(
        model=model, temperature=0, max_output_tokens=60, tools=[RESPONSES_TOOL], tool_choice="auto",
        input=[{"role": "user", "content": question}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id,
                "output": json.dumps({"temperature": 21, "sky": "clear"})}])
    check(second.status in ("completed", "incomplete"), f"round trip: status {second.status}")
    check(len(second.output) >= 1, "round trip: no output")
    print(f"responses round trip: {second.status}: {second.output_text!r}")

    named = client.responses.create(model=model, temperature=0, max_output_tokens=120, input=question,
                                    tools=[RESPONSES_TOOL],
                                    tool_choice={"type": "function", "name": "get_weather"})
    check([item.name for item in named.output if item.type == "function_call"] == ["get_weather"],
          f"named: {named.output!r}")
    try:
        client.responses.create(model=model, input=question, previous_response_id=second.id)
        check(False, "previous_response_id was accepted")
    except openai.BadRequestError as e:
        check("previous_response_id" in str(e), f"previous_response_id: {e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--parse", action="store_true")
    ap.add_argument("--tools", action="store_true")
    ap.add_argument("--responses-tools", action="store_true")
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key="unused", max_retries=0, timeout=120)
    if a.parse:
        parse(client, a.model)
    if a.tools:
        tools(client, a.model)
    if a.responses_tools:
        responses_tools(client, a.model)
    print("ok")


if __name__ == "__main__":
    main()
