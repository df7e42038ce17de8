// The chat template engine (model/jinja) against Python's jinja2 as
// transformers sets it up: the goldens of scripts/reference/jinja_golden.py
// (real chat templates over many conversations, and edge-case templates),
// byte for byte, and failing exactly where jinja2 raises; then each feature,
// the error paths and the safety limits on their own.
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/jinja/jinja.h"

namespace specline::jinja {
namespace {

using nlohmann::ordered_json;

std::string SourcePath(const std::string& relative) {
  return std::string(SPECLINE_SOURCE_DIR) + "/" + relative;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The output, or "ERROR(<code>): <message>".
std::string Render(std::string_view source, const ordered_json& context = ordered_json::object(),
                Options options = {}) {
  auto t = Template::Parse(source, options);
  if (!t.ok()) {
    return "ERROR(" + absl::StatusCodeToString(t.status().code()) + "): " + std::string(t.status().message());
  }
  auto out = t->Render(context);
  if (!out.ok()) {
    return "ERROR(" + absl::StatusCodeToString(out.status().code()) + "): " + std::string(out.status().message());
  }
  return *out;
}

bool IsError(const std::string& r) { return r.rfind("ERROR(", 0) == 0; }

// The golden script's strftime_now returns "<<strftime_now:FMT>>"; the
// engine prints the clock, so the expectation takes the clock too.
std::string WithClock(std::string expected) {
  const std::string open = "<<strftime_now:";
  for (size_t p = expected.find(open); p != std::string::npos; p = expected.find(open, p)) {
    size_t end = expected.find(">>", p);
    std::string fmt = expected.substr(p + open.size(), end - p - open.size());
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
    expected.replace(p, end + 2 - p, std::string(buf, n));
    p += n;
  }
  return expected;
}

TEST(JinjaGoldens, MatchJinja2ByteForByte) {
  auto goldens = ordered_json::parse(ReadFile(SourcePath("tests/data/jinja/goldens.json")));
  const auto& cases = goldens.at("cases");
  ASSERT_GE(cases.size(), 1000u) << "goldens.json lost its cases";
  size_t outputs = 0, errors = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    std::string source = c.contains("template")
                             ? ReadFile(SourcePath("tests/data/jinja/" + c.at("template").get<std::string>()))
                             : c.at("source").get<std::string>();
    ASSERT_FALSE(source.empty());
    const ordered_json& context =
        c.at("context").is_string() ? goldens.at("contexts").at(c.at("context").get<std::string>()) : c.at("context");
    std::string got = Render(source, context);
    if (c.contains("output")) {
      ++outputs;
      EXPECT_EQ(got, WithClock(c.at("output").get<std::string>()));
    } else {
      ++errors;
      EXPECT_TRUE(IsError(got)) << "jinja2 raised " << c.at("error") << " but the engine printed:\n" << got;
    }
  }
  EXPECT_GT(errors, 50u);
  EXPECT_GT(outputs, 900u);
}

TEST(JinjaWhitespace, TrimAndLstripBlocksAsTransformers) {
  EXPECT_EQ(Render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  // lstrip_blocks never applies to {{ }}; trim_blocks only after %} and #}.
  EXPECT_EQ(Render("x\n   {{ 1 }}\n   {# c #}\ny"), "x\n   1\ny");
  EXPECT_EQ(Render("a  \n {{- 'x' -}}  \n b"), "axb");
  EXPECT_EQ(Render("a\n  {%+ if true %}b{% endif +%}\nc"), "a\n  b\nc");
  // One trailing newline of the source is dropped; \r\n becomes \n.
  EXPECT_EQ(Render("x\r\n{% if true %}\r\ny\r\n{% endif %}\r\n"), "x\ny\n");
  EXPECT_EQ(Render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  Options plain;
  plain.trim_blocks = false;
  plain.lstrip_blocks = false;
  EXPECT_EQ(Render("a\n  {% if true %}\nb{% endif %}", {}, plain), "a\n  \nb");
}

TEST(JinjaExpressions, PythonValuesAndOperators) {
  EXPECT_EQ(Render("{{ none }} {{ true }} {{ 1.0 }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 % 3 }}"),
            "None True 1.0 1e+16 0.30000000000000004 3.5 3 2");
  EXPECT_EQ(Render("{{ [1, 'a', none] }} {{ {'k': true} }} {{ (1,) }} {{ \"it's\" }}"),
            "[1, 'a', None] {'k': True} (1,) it's");
  EXPECT_EQ(Render("{{ 'héllo😀'[1:4] }}|{{ 'abc'[::-1] }}|{{ [1,2,3][-1] }}|{{ 'é😀'|length }}"), "éll|cba|3|2");
  EXPECT_EQ(Render("{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ 0 or 'x' }} {{ 'a' if false else 'b' }}"),
            "True True True x b");
  EXPECT_EQ(Render("{{ m.role }}{{ m['content'] }}", {{"m", {{"role", "user"}, {"content", "!"}}}}), "user!");
}

TEST(JinjaExpressions, UndefinedFollowsJinja2DefaultUndefined) {
  EXPECT_EQ(Render("[{{ missing }}][{{ d.nope }}][{{ missing|default('x') }}][{{ missing is defined }}]",
                {{"d", ordered_json::object()}}),
            "[][][x][False]");
  EXPECT_TRUE(IsError(Render("{{ missing.attr }}")));
  EXPECT_TRUE(IsError(Render("{{ missing + 1 }}")));
  EXPECT_TRUE(IsError(Render("{{ missing|tojson }}")));
}

TEST(JinjaStatements, LoopsScopesNamespacesMacros) {
  EXPECT_EQ(Render("{% for x in 'abc' %}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.previtem }}"
                "{{ loop.cycle('o', 'e') }};{% endfor %}"),
            "1TrueFalseo;2FalseFalseae;3FalseTruebo;");
  EXPECT_EQ(Render("{% for x in [1,2,3,4] if x is even %}{{ x }}/{{ loop.length }} {% endfor %}"), "2/2 4/2 ");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }};{% else %}none{% endfor %}", {{"d", {{"z", 1}, {"a", 2}}}}),
            "z=1;a=2;");
  EXPECT_EQ(Render("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}"
                "{{ i }}{% endfor %}"),
            "0134");
  // A set inside a loop does not leak out; a namespace does.
  EXPECT_EQ(Render("{% set x = 5 %}{% set ns = namespace(n=0) %}{% for i in [1, 2] %}{% set x = i %}{% set ns.n = ns.n + i %}"
                "{% endfor %}{{ x }} {{ ns.n }}"),
            "5 3");
  EXPECT_EQ(Render("{% set x %}[{{ 1 + 1 }}]{% endset %}{{ x }}"), "[2]");
  EXPECT_EQ(Render("{% macro f(a, b='d') %}{{ a }}{{ b }}{{ kwargs }}{% endmacro %}{{ f(1) }} {{ f(b=2, a=3, c=4) }}"),
            "1d{} 32{'c': 4}");
  EXPECT_EQ(Render("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}body{% endcall %}"), "<body>");
  EXPECT_EQ(Render("{% generation %}kept{% endgeneration %}"), "kept");
  EXPECT_EQ(Render("{% filter upper %}ab{% endfilter %}"), "AB");
}

TEST(JinjaBuiltins, FiltersTestsAndMethods) {
  ordered_json ctx = {{"l", {{{"role", "user"}, {"n", 2}}, {{"role", "bot"}, {"n", 1}}}}};
  EXPECT_EQ(Render("{{ l|selectattr('role', 'equalto', 'user')|map(attribute='n')|list }}"
                "{{ l|rejectattr('role', 'eq', 'user')|list|length }}{{ l|sort(attribute='n')|map(attribute='role')|join(',') }}",
                ctx),
            "[2]1bot,user");
  EXPECT_EQ(Render("{{ ['b', 'A', 'a']|sort }}{{ ['a', 'A']|unique|list }}{{ 2.5|round }}{{ 3|round }}{{ [3, 1]|max }}"),
            "['A', 'a', 'b']['a']2.033");
  EXPECT_EQ(Render("{{ '  x '|trim }}|{{ 'a b-c'|title }}|{{ 'a\\nb'|indent(2) }}|{{ '<&>'|e }}|{{ 'x'|safe + '<' }}"),
            "x|A B-C|a\n  b|&lt;&amp;&gt;|x&lt;");
  EXPECT_EQ(Render("{{ {'b': [1, 2.5, none], 'a': 'é\\u0001'}|tojson }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|"
                "{{ [1]|tojson(indent=2) }}|{{ {'a': 1}|tojson(separators=(',', ':')) }}"),
            "{\"b\": [1, 2.5, null], \"a\": \"é\\u0001\"}|{\"a\": 2, \"b\": 1}|[\n  1\n]|{\"a\":1}");
  EXPECT_EQ(Render("{{ 1 is number }}{{ true is integer }}{{ 'a' is string }}{{ {} is mapping }}{{ 3 is odd }}"
                "{{ 9 is divisibleby 3 }}{{ none is none }}{{ x is undefined }}"),
            "TrueFalseTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(Render("{{ ' a b '.split() }}{{ 'a,b,c'.split(',', 1) }}{{ 'xax'.strip('x') }}{{ 'ab'.startswith(('x', 'a')) }}"
                "{{ 'aXa'.replace('a', 'b') }}{{ 'hi there'.title() }}{{ d.get('z', 0) }}{{ d.keys()|list }}",
                {{"d", {{"k", 1}}}}),
            "['a', 'b']['a', 'b,c']aTruebXbHi There0['k']");
}

TEST(JinjaErrors, RaiseExceptionSyntaxAndRuntimeErrors) {
  auto t = Template::Parse("{{ raise_exception('Only user and assistant roles are supported!') }}");
  ASSERT_TRUE(t.ok());
  auto r = t->Render(ordered_json::object());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "chat template raised: Only user and assistant roles are supported!");

  auto bad = Template::Parse("line 1\n{% if true %}\n{{ x }}");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("chat template line 3"), std::string::npos) << bad.status();
  EXPECT_NE(bad.status().message().find("endif"), std::string::npos) << bad.status();

  EXPECT_EQ(Template::Parse("{{ x|no_such_filter }}").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Template::Parse("{{ x is no_such_test }}").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Template::Parse("{% frobnicate %}").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Template::Parse("{% break %}").status().code(), absl::StatusCode::kInvalidArgument);
  // Inside an `if`, jinja2 only fails when the unknown filter runs.
  EXPECT_EQ(Render("{% if false %}{{ x|no_such_filter }}{% endif %}ok"), "ok");
  EXPECT_TRUE(IsError(Render("{% if true %}{{ x|no_such_filter }}{% endif %}")));
  for (const char* src : {"{{ 'a'() }}", "{{ 'a' + 1 }}", "{{ 1 // 0 }}", "{{ 'a' < 1 }}", "{% for x in none %}{% endfor %}",
                          "{{ [1].append(2) }}", "{{ range(100001)|length }}", "{{ [1]|select|length }}"}) {
    std::string got = Render(src);
    EXPECT_TRUE(got.rfind("ERROR(INVALID_ARGUMENT)", 0) == 0) << src << " -> " << got;
  }
  // The context must be an object.
  EXPECT_FALSE(Template::Parse("x")->Render(ordered_json::array()).ok());
}

TEST(JinjaLimits, RunawayLoopsRecursionAndOutputStop) {
  Options o;
  o.limits.max_loop_iterations = 10000;
  std::string loops = Render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", {}, o);
  EXPECT_EQ(loops.rfind("ERROR(RESOURCE_EXHAUSTED)", 0), 0u) << loops;
  EXPECT_NE(loops.find("max_loop_iterations"), std::string::npos) << loops;
  // The default limit also stops a loop nest of 10^10 iterations.
  std::string deep = Render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  EXPECT_NE(deep.find("max_loop_iterations"), std::string::npos) << deep;

  std::string rec = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(rec.rfind("ERROR(RESOURCE_EXHAUSTED)", 0), 0u) << rec;
  EXPECT_NE(rec.find("max_recursion_depth"), std::string::npos) << rec;
  o.limits.max_recursion_depth = 5;
  EXPECT_EQ(Render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ f(4) }}", {}, o),
            "01234");
  EXPECT_NE(Render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}", {}, o)
                .find("max_recursion_depth"),
            std::string::npos);

  o.limits.max_output_bytes = 1000;
  std::string big = Render("{% for i in range(100) %}{{ 'x' * 20 }}{% endfor %}", {}, o);
  EXPECT_NE(big.find("max_output_bytes"), std::string::npos) << big;
  EXPECT_NE(Render("{% set s = 'x' * 100000 %}", {}, o).find("max_output_bytes"), std::string::npos);
  EXPECT_EQ(Render("{% for i in range(10) %}{{ 'x' * 100 }}{% endfor %}", {}, o).size(), 1000u);

  // Parsing deeply nested input fails cleanly instead of overflowing the stack.
  std::string nested = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_FALSE(Template::Parse("{{ " + nested + " }}").ok());
}

ordered_json TwentyMessages() {
  ordered_json msgs = ordered_json::array();
  msgs.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
  for (int i = 0; i < 19; ++i) {
    msgs.push_back({{"role", i % 2 ? "assistant" : "user"},
                    {"content", "Message number " + std::to_string(i) + " with some text 😀 in it."}});
  }
  return {{"messages", msgs}, {"add_generation_prompt", true}, {"bos_token", "<s>"}, {"eos_token", "</s>"},
          {"date_string", "26 Jul 2024"}};
}

TEST(JinjaTemplate, CopyableAndThreadSafe) {
  std::string src = ReadFile(SourcePath("tests/data/jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
  auto parsed = Template::Parse(src);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  Template copy = *parsed;
  Template moved = std::move(*parsed);
  ordered_json ctx = TwentyMessages();
  std::string expected = *copy.Render(ctx);
  ASSERT_NE(expected.find("Message number 18"), std::string::npos);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) mismatches[t] += *moved.Render(ctx) != expected;
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// A long conversation renders whole: every message in order, then the
// generation prompt, the same on every render. (How fast is not asserted:
// a wall-clock bound fails on a loaded machine or in a sanitizer build at
// -O0; render time belongs in a benchmark.)
TEST(JinjaTemplate, RendersTwentyMessages) {
  std::string src = ReadFile(SourcePath("tests/data/jinja/templates/meta-llama-Llama-3.1-8B-Instruct.jinja"));
  auto t = Template::Parse(src);
  ASSERT_TRUE(t.ok()) << t.status();
  ordered_json ctx = TwentyMessages();
  auto first = t->Render(ctx);
  ASSERT_TRUE(first.ok()) << first.status();
  size_t at = first->find("You are a helpful assistant.");
  ASSERT_NE(at, std::string::npos) << *first;
  for (int i = 0; i < 19; ++i) {
    const std::string want = "Message number " + std::to_string(i) + " with some text 😀 in it.";
    const size_t next = first->find(want, at);
    ASSERT_NE(next, std::string::npos) << "message " << i << " missing or out of order:\n" << *first;
    at = next;
  }
  EXPECT_EQ(first->substr(first->size() - std::string("assistant<|end_header_id|>\n\n").size()),
            "assistant<|end_header_id|>\n\n")
      << *first;
  for (int i = 0; i < 20; ++i) {
    auto again = t->Render(ctx);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *first);
  }
}

}  // namespace
}  // namespace specline::jinja
