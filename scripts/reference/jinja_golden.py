#!/usr/bin/env python3
"""Writes tests/data/jinja/goldens.json: chat templates rendered by Python's
jinja2 exactly as transformers' apply_chat_template sets it up, for the C++
engine (model/jinja) to match byte for byte (tests/jinja_test.cc).

The environment (render_reference below) is transformers' own
(transformers/utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, jinja2.ext.loopcontrols]), its tojson filter
(json.dumps with ensure_ascii=False and indent/separators/sort_keys), and the
raise_exception / strftime_now globals; the template's variables are the
context's keys (messages, tools, add_generation_prompt, bos_token, ...).

Cases: every template in tests/data/jinja/templates/ (real chat templates,
README.md there says where each comes from) over the conversations below,
plus hand-written edge-case templates (EDGE_CASES). A template case names its
conversation in "context" (a key of "contexts"); an edge case carries its
own context object. A case records either
"output" or "error" (the exception's type and message; the C++ test only
checks that it fails too). strftime_now returns a marker
"<<strftime_now:FMT>>" here, which the test replaces with its own clock.

Run from the repository root (python3 with jinja2 3.1.x from PyPI):
  python3 scripts/reference/jinja_golden.py
"""
import copy
import datetime
import glob
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "jinja")
TEMPLATES = os.path.join(DATA, "templates")


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} tag: renders its body unchanged (the
    index tracking only matters for assistant masks)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation"), [], [], body).set_lineno(lineno)

    def _generation(self, caller):
        return caller()


def make_env(strftime_now=None):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def real_strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now or real_strftime_now
    return env


_COMPILED = {}


def render_reference(env, source, context):
    """{"output": str} or {"error": "Type: message"}; never raises."""
    key = (id(env), source)
    if key not in _COMPILED:
        try:
            _COMPILED[key] = env.from_string(source)
        except Exception as e:  # a syntax error is the template's failure too
            _COMPILED[key] = e
    template = _COMPILED[key]
    if isinstance(template, Exception):
        return {"error": f"{type(template).__name__}: {template}"}
    try:
        return {"output": template.render(**copy.deepcopy(context))}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


# ---- conversations -------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web. Returns the top results as “snippets”.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 3}},
            "required": ["query"],
        },
    },
}


def conversations():
    """(name, extra context) pairs; messages and the rest of the context."""
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    call = {"id": "call_0001", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
    tool_turns = [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0001", "name": "get_weather",
         "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21 °C and clear in Paris."},
    ]
    yield "user_only", {"messages": [{"role": "user", "content": "Hello!"}], "add_generation_prompt": True}
    yield "user_only_no_prompt", {"messages": [{"role": "user", "content": "Hello!"}],
                                  "add_generation_prompt": False}
    yield "system_multi_turn", {"messages": [
        sys_msg,
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ], "add_generation_prompt": True}
    yield "ends_with_assistant", {"messages": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ], "add_generation_prompt": False}
    yield "whitespace_content", {"messages": [
        sys_msg,
        {"role": "user", "content": "  padded \n\n question  \n"},
        {"role": "assistant", "content": "\n  answer with spaces  "},
        {"role": "user", "content": "\ttabbed"},
    ], "add_generation_prompt": True}
    yield "empty_content", {"messages": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "again"},
    ], "add_generation_prompt": True}
    yield "unicode", {"messages": [
        {"role": "system", "content": "Réponds en français. 日本語も大丈夫。"},
        {"role": "user", "content": "Emoji 😀👍🏽, CJK 你好世界, RTL שלום, ctrl \x01\x7f, quote \"'\\"},
        {"role": "assistant", "content": "D’accord — ça marche ✓"},
        {"role": "user", "content": "ẞ straße ΑΒΓ αβγ Привет"},
    ], "add_generation_prompt": True}
    yield "tools_listed", {"messages": [sys_msg, {"role": "user", "content": "Weather in Paris?"}],
                           "tools": [WEATHER_TOOL, SEARCH_TOOL], "add_generation_prompt": True}
    yield "tool_call_round_trip", {"messages": [sys_msg] + tool_turns, "tools": [WEATHER_TOOL],
                                   "add_generation_prompt": False}
    yield "tool_call_pending", {"messages": tool_turns[:3], "tools": [WEATHER_TOOL, SEARCH_TOOL],
                                "add_generation_prompt": True}
    string_args = copy.deepcopy(tool_turns)
    string_args[1]["tool_calls"][0]["function"]["arguments"] = "{\"city\": \"Paris\"}"
    string_args[1]["content"] = None
    yield "tool_call_string_args", {"messages": string_args, "tools": [WEATHER_TOOL],
                                    "add_generation_prompt": True}
    yield "thinking", {"messages": [
        {"role": "user", "content": "Think first: 17*3?"},
        {"role": "assistant", "content": "<think>\n17*3 = 51\n</think>\n\n51", "reasoning_content": "17*3 = 51"},
        {"role": "user", "content": "And 18*3?"},
    ], "add_generation_prompt": True, "enable_thinking": False}
    yield "unknown_role", {"messages": [
        {"role": "user", "content": "hi"}, {"role": "narrator", "content": "Meanwhile..."},
    ], "add_generation_prompt": True}
    yield "not_alternating", {"messages": [
        {"role": "user", "content": "one"}, {"role": "user", "content": "two"},
    ], "add_generation_prompt": True}
    yield "system_only", {"messages": [sys_msg], "add_generation_prompt": True}


BASE_CONTEXT = {"bos_token": "<s>", "eos_token": "</s>", "date_string": "26 Jul 2024"}


# ---- hand-written edge cases ---------------------------------------------

EDGE_CASES = [
    # whitespace control: trim_blocks, lstrip_blocks, - and +
    ("ws_trim_lstrip", "a\n  {% if true %}\n  b\n  {% endif %}\nc\n", {}),
    ("ws_minus", "a  \n {{- 'x' -}}  \n b {%- if true -%}  c  {%- endif -%} d", {}),
    ("ws_plus", "a\n  {%+ if true %}b{% endif +%}\nc", {}),
    ("ws_var_no_lstrip", "x\n   {{ 1 }}\n   {# c #}\ny", {}),
    ("ws_comment_trim", "a{# comment #}\nb{#- c -#}  \n  c", {}),
    ("ws_raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}\nafter", {}),
    ("ws_crlf_trailing", "line1\r\n{% if true %}\r\nline2\r\n{% endif %}\r\n", {}),
    ("ws_line_start_after_tag", "{% if true %}\n    {% if true %}\nx{% endif %}{% endif %}", {}),
    # literals and printing (Python str/repr)
    ("print_values", "{{ none }} {{ true }} {{ false }} {{ 1 }} {{ 1.0 }} {{ 2.5e-5 }} {{ 1e16 }} {{ 0.1 + 0.2 }}"
     " {{ 'it\\'s' }} {{ [1, 'a', none, [true]] }} {{ {'k': 'v', 'n': 1.5} }} {{ (1,) }} {{ () }} {{ ('a', \"b'\") }}", {}),
    ("print_context", "{{ d }}|{{ l }}|{{ s }}|{{ n }}|{{ f }}", {"d": {"a": [1, {"b": None}]}, "l": ["x\ny", "é"], "s": "str",
                                                              "n": -3, "f": 2.0}),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1 + 2 * 3 - 4 }}"
     " {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1 ~ 2 ~ 'x' }} {{ -(3) }} {{ 7.5 % 2 }}", {}),
    ("compare", "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] == [1,2] }} {{ 2 in [1,2] }}"
     " {{ 'b' in 'abc' }} {{ 'x' not in {'x': 1} }} {{ none == none }} {{ 'a' != 'a' }}", {}),
    ("logic", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' or [] }} {{ not none }} {{ 'a' if false else 'b' }} [{{ 'a' if false }}]", {}),
    # undefined
    ("undefined_print", "[{{ missing }}][{{ missing|default('dflt') }}][{{ ''|default('e', true) }}][{{ missing is defined }}]", {}),
    ("undefined_attr_error", "{{ missing.attr }}", {}),
    ("undefined_item_error", "{{ missing['k'] }}", {}),
    ("undefined_soft", "[{{ d.nope }}][{{ d['nope'] }}][{{ l[10] }}][{{ 'abc'.nope }}][{{ none.x }}]", {"d": {}, "l": []}),
    ("undefined_attr_of_missing_key", "{{ d.nope.deeper }}", {"d": {}}),
    ("undefined_arith_error", "{{ missing + 1 }}", {}),
    ("attr_filter_is_getattr", "[{{ {'a': 1}|attr('a') }}][{{ namespace(b=2)|attr('b') }}]{{ {'a': 1}|attr('items') is defined }}", {}),
    ("undefined_in_repr", "{{ (missing, 1) }} {{ [missing] }} {{ {'k': missing} }}", {}),
    ("undefined_iter", "{% for x in missing %}x{% else %}empty{% endfor %}{{ missing|length }}{{ missing|list }}", {}),
    # loops
    ("loop_vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
     "{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]{{ loop.cycle('o','e') }};{% endfor %}", {}),
    ("loop_else_filter", "{% for x in [1,2,3,4] if x is even %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}"
     "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
    ("loop_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1,2],[3,4]] %}{{ a + b }}{% endfor %}",
     {"d": {"z": 1, "a": 2}}),
    ("loop_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("loop_scope", "{% set x = 5 %}{% for i in [1,2] %}[{{ x }}]{% set x = i %}[{{ x }}]{% endfor %}{{ x }}", {}),
    ("loop_nested", "{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}", {}),
    ("loop_dict", "{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", {}),
    ("loop_none_error", "{% for x in none %}{% endfor %}", {}),
    # set, namespace, macros
    ("namespace", "{% set ns = namespace(found=false, n=0) %}{% for m in [1,2,3] %}{% if m > 1 %}{% set ns.found = true %}"
     "{% set ns.n = ns.n + m %}{% endif %}{% endfor %}{{ ns.found }} {{ ns.n }}", {}),
    ("set_block", "{% set x %}  inner {{ 1 + 1 }}\n{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}", {}),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = (3, 4) %}{{ c }}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} "
     "{{ greet(punct='.', name='C') }}", {}),
    ("macro_kwargs_varargs", "{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, x=4) }}", {}),
    ("macro_too_many_args", "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}", {}),
    ("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold{% endcall %}", {}),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}", {}),
    ("macro_closure_in_loop", "{% for x in [1, 2] %}{% macro m() %}<{{ x }}>{% endmacro %}{{ m() }}{% endfor %}", {}),
    ("caller_sees_loop_var", "{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% for m in ['a', 'b'] %}{% call wrap() %}{{ m }}"
     "{% endcall %}{% endfor %}", {}),
    ("caller_args", "{% macro each(l) %}{% for i in l %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}"
     "<{{ v * 10 }}>{% endcall %}", {}),
    ("macro_sees_later_global", "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}", {}),
    ("macro_set_does_not_leak", "{% set x = 1 %}{% macro m() %}{% set x = 2 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}", {}),
    ("printf_percent", "{{ '%s and %d' % ('a', 3) }}|{{ '%s' % 'x' }}|{{ '100%%' % () }}|{{ '%r' % 'q' }}", {}),
    ("filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %}", {}),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("generation_tag", "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}",
     {"messages": [{"role": "assistant", "content": "gen"}]}),
    # strings and slices
    ("slices", "{{ 'hello'[1:] }} {{ 'hello'[::-1] }} {{ 'hello'[-2:] }} {{ [1,2,3,4][1:3] }} {{ [1,2,3][::2] }} {{ 'héllo😀'[1:4] }} {{ 'abc'[0] }}{{ 'abc'[-1] }}", {}),
    ("str_methods", "{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'b  '.rstrip() }}|{{ 'a b  c'.split() }}"
     "|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'abc'.startswith('ab') }}"
     "|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}"
     "|{{ 'abc'.upper() }}{{ 'ABC'.lower() }}|{{ 'héllo'.find('l') }}|{{ 'aaa'.count('a') }}|{{ '-'.join(['a', 'b']) }}"
     "|{{ '{} and {}'.format(1, 'two') }}|{{ 'a\\nb'.splitlines() }}", {}),
    ("str_split_ws", "{{ '  a  b  '.split(none, 1) }}{{ '\\ta\\n b'.split() }}{{ ''.split() }}{{ ''.split(',') }}"
     "{{ '  a  b  '.rsplit(none, 1) }}{{ 'a b c'.rsplit() }}{{ 'a,b,c'.rsplit(',') }}", {}),
    ("str_misc", "{{ 'abc'.index('c') }}{{ 'a-b'.rfind('-') }}{{ 'x'.zfill is defined }}{{ '42'.isdigit() }}{{ 'ab'.isalpha() }}"
     "{{ 'Ab'.isupper() }}{{ 'ab'.islower() }}{{ ' '.isspace() }}{{ 'pre_x'.removeprefix('pre_') }}"
     "{{ '7'.zfill(3) }}{{ '-7'.zfill(3) }}{{ 'a'.ljust(3, '.') }}{{ 'a'.rjust(3) }}{{ 'ab'.center(5, '*') }}"
     "{{ 'a=b=c'.partition('=') }}{{ 'a=b=c'.rpartition('=') }}{{ 'aB'.swapcase() }}", {}),
    ("unicode_case", "{{ 'ÉCOLE ÀÖ'|lower }} {{ 'straße éà'|upper }} {{ 'ñandú'|capitalize }} {{ 'élan vital'|title }} {{ 'ΑΒΓ'|lower }} {{ 'привет'|upper }}", {}),
    ("int_float_edges", "{{ 10 ** 18 }} {{ 2 ** 62 }} {{ 1e308 * 10 }} {{ -0.0 }} {{ 1/3 }} {{ 123456789.123456789 }} {{ 5e-324 }} {{ 1.5e300 }}", {}),
    ("dict_literal_order", "{{ {'b': 1, 'a': 2, 'b': 3} }} {{ {1: 'x', 'k': none} }} {{ {1: 'x'}|tojson }}", {}),
    ("in_and_compare_mixed", "{{ 1 in [1.0] }} {{ none in [none] }} {{ 'a' in ['a'] }} {{ [1] < [1, 0] }} {{ (1, 2) < (1, 3) }}", {}),
    ("dict_methods", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }}",
     {"d": {"a": 1, "b": [2]}}),
    ("dict_key_named_like_method", "{{ d['items'] }} {{ d.items is defined }}", {"d": {"items": 5}}),
    ("list_mutation_error", "{% set l = [1] %}{{ l.append(2) }}", {}),
    # tests
    ("tests", "{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is boolean }}{{ true is integer }}{{ 'a' is string }}"
     "{{ {} is mapping }}{{ [] is sequence }}{{ 'a' is iterable }}{{ none is none }}{{ 3 is odd }}{{ 4 is even }}"
     "{{ 9 is divisibleby 3 }}{{ 1 is equalto 1 }}{{ true is sameas true }}{{ false is false }}{{ 1 is true }}"
     "{{ x is undefined }}{{ 'a' is lower }}{{ 'A' is upper }}{{ 2 is gt 1 }}{{ 1 is in [1] }}{{ 'x' is not defined }}", {}),
    ("test_unknown", "{{ 1 is frobnicated }}", {}),
    # filters
    ("filters_text", "{{ '  t  '|trim }}|{{ 'xxtxx'|trim('x') }}|{{ 'abc'|length }}|{{ 'é😀'|count }}|{{ 'a b-c(d'|title }}"
     "|{{ 'hELLO wORLD'|capitalize }}|{{ 'AbC'|lower }}{{ 'aBc'|upper }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'a\\nb\\n\\nc'|indent(2) }}"
     "|{{ 'x\\ny'|indent(2, true) }}|{{ 'one two, three'|wordcount }}|{{ '<a href=\"x\">&\\'</a>'|e }}|{{ 'x'|safe }}"
     "|{{ 'hello world foo bar baz'|truncate(12) }}|{{ 'a'|center(5) }}|{{ '%s-%d'|format('a', 3) }}", {}),
    ("filters_seq", "{{ [3,1,2]|sort }}{{ ['b','A','a']|sort }}{{ [3,1,2]|sort(reverse=true) }}{{ l|sort(attribute='n')|map(attribute='n')|list }}"
     "{{ ['a','A','b']|unique|list }}{{ [1,2,3]|reverse|list }}{{ [1,2,3]|first }}{{ [1,2,3]|last }}{{ [4,5]|max }}{{ [4,5]|min }}"
     "{{ [1,2,3]|sum }}{{ l|sum(attribute='n') }}{{ [1,2,3]|join('-') }}{{ l|join(',', attribute='n') }}{{ 'abc'|list }}"
     "{{ [1,2,3,4,5]|batch(2)|list }}{{ {'b': 1, 'a': 2}|dictsort }}{{ {'a': 1}|items|list }}",
     {"l": [{"n": 2}, {"n": 1}, {"n": 3}]}),
    ("filters_select", "{{ l|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }}"
     "{{ l|rejectattr('role', 'equalto', 'user')|list|length }}{{ l|selectattr('extra')|list }}{{ l|selectattr('extra', 'defined')|list }}"
     "{{ [1,2,3,4]|select('odd')|list }}{{ [0,1,'',2]|select|list }}{{ [1,2,3]|reject('gt', 1)|list }}{{ [-1,2]|map('abs')|list }}"
     "{{ ['1','2']|map('int')|sum }}", {"l": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b", "extra": 1},
                                              {"role": "user", "content": "c"}]}),
    ("filters_numbers", "{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 2.7|round(0, 'floor') }} {{ 2.1|round(0, 'ceil') }}"
     " {{ -3|abs }} {{ '42'|int }} {{ '4.2'|float }} {{ 'x'|int }} {{ 3.9|int }} {{ 3|float }} {{ 7|string }} {{ 10|round }}", {}),
    ("generator_truthy_and_len_error", "{% if []|select %}gen is true{% endif %}{{ [1]|select|length }}", {}),
    ("tojson", "{{ v|tojson }}\n{{ v|tojson(indent=2) }}\n{{ v|tojson(separators=(',', ':')) }}\n{{ v|tojson(sort_keys=true) }}"
     "\n{{ 'é\\u0001\\t\"\\\\</script>'|tojson }}\n{{ [1.0, 1e20, -0.0]|tojson }}\n{{ {}|tojson }}{{ []|tojson(indent=4) }}",
     {"v": {"b": [1, 2.5, None, True, "ü😀"], "a": {"nested": {}}}}),
    ("tojson_undefined_error", "{{ missing|tojson }}", {}),
    ("unknown_filter", "{{ 'x'|frobnicate }}", {}),
    ("filter_in_string_join_error", "{{ 1|join }}", {}),
    # globals and errors
    ("range_dict_namespace", "{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}{{ dict(a=1, b='x') }}{{ namespace(a=1).a }}", {}),
    ("range_too_big", "{{ range(100001)|length }}", {}),
    ("raise_exception", "{% if messages|length == 0 %}{{ raise_exception('No messages!') }}{% endif %}", {"messages": []}),
    ("syntax_error_endif", "{% if true %}x", {}),
    ("syntax_error_unknown_tag", "{% frobnicate %}", {}),
    ("syntax_error_expr", "{{ 1 + }}", {}),
    ("call_non_callable", "{{ 'abc'() }}", {}),
    ("compare_type_error", "{{ 'a' < 1 }}", {}),
    ("str_concat_error", "{{ 'a' + 1 }}", {}),
    ("div_zero", "{{ 1 // 0 }}", {}),
    ("sandbox_underscore", "[{{ ''.__class__ }}]", {}),
    ("strftime", "{{ strftime_now('%Y-%m-%d') }}", {}),
]


def main():
    env = make_env(strftime_now=lambda fmt: f"<<strftime_now:{fmt}>>")
    cases = []
    paths = sorted(glob.glob(os.path.join(TEMPLATES, "*.jinja")))
    if not paths:
        sys.exit(f"no templates under {TEMPLATES}")
    # Conversations are stored once; template cases name theirs.
    contexts = {}
    for name, ctx in conversations():
        contexts[name] = dict(BASE_CONTEXT)
        contexts[name].update(ctx)
    for path in paths:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        rel = os.path.relpath(path, DATA)
        for name, context in contexts.items():
            case = {"name": f"{os.path.basename(path)}:{name}", "template": rel, "context": name}
            case.update(render_reference(env, source, context))
            cases.append(case)
    for name, source, ctx in EDGE_CASES:
        case = {"name": f"edge:{name}", "source": source, "context": ctx}
        case.update(render_reference(env, source, ctx))
        cases.append(case)
    out = {
        "generator": "scripts/reference/jinja_golden.py",
        "versions": {"python": sys.version.split()[0], "jinja2": jinja2.__version__},
        "contexts": contexts,
        "cases": cases,
    }
    with open(os.path.join(DATA, "goldens.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum("error" in c for c in cases)
    print(f"wrote {len(cases)} cases ({errors} expected errors) to tests/data/jinja/goldens.json")


if __name__ == "__main__":
    main()
