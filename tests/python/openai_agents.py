"""What agent frameworks and extraction pipelines do with the official
`openai` package, against a live specline deployment
(tests/python_client_test.cc starts it):

  --parse   client.chat.completions.parse(response_format=<pydantic model>)
            returns a parsed object of that model;
  --tools   a tool-calling loop: tool_choice="required" makes a call to the
            tool (valid JSON arguments for its parameters), the tool's result
            goes back as a `tool` message, and a second turn with
            tool_choice="auto" answers.

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--parse", action="store_true")
    ap.add_argument("--tools", action="store_true")
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key="unused", max_retries=0, timeout=120)
    if a.parse:
        parse(client, a.model)
    if a.tools:
        tools(client, a.model)
    print("ok")


if __name__ == "__main__":
    main()
