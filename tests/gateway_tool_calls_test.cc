// Tool calls on the OpenAI API (services/tool_calls, services/openai/
// tool_request, tool_call_response): each family's parser on whole texts
// and on the same texts streamed in random pieces, the syntax read from
// the real chat templates, the schema that enforces a call, the request's
// validation, the prompt the Qwen2.5 template renders of tools and tool
// messages, and the response shapes.
#include <map>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/formats/model_source.h"
#include "model/tokenizer/model_tokenizer.h"
#include "services/openai/openai_request.h"
#include "services/openai/tool_call_response.h"
#include "services/request_builder.h"
#include "services/tool_calls/generic_prompt.h"
#include "services/tool_calls/tool_call_parser.h"
#include "services/tool_calls/tool_call_schema.h"
#include "tests/test_util.h"

namespace specline::tool_calls {
namespace {

using nlohmann::json;
using testing::SmolLm2Path;
using testing::SourcePath;

// The same text fed in random pieces (1 to 7 bytes), as a stream delivers it.
ParsedText ParseInPieces(Syntax syntax, std::string_view text, uint32_t seed,
                         std::vector<std::string>* contents = nullptr) {
  std::mt19937 rng(seed);
  auto parser = MakeParser(syntax);
  ParsedText out;
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::min<size_t>(1 + rng() % 7, text.size() - at);
    ParsedText piece = parser->Push(text.substr(at, n));
    if (contents) contents->push_back(piece.content);
    out.Append(std::move(piece));
    at += n;
  }
  ParsedText last = parser->Finish();
  if (contents) contents->push_back(last.content);
  out.Append(std::move(last));
  return out;
}

struct Expected {
  std::string content;
  std::vector<std::pair<std::string, json>> calls;  // name, arguments
};

void ExpectParsed(const ParsedText& got, const Expected& want, const std::string& what) {
  EXPECT_EQ(got.content, want.content) << what;
  ASSERT_EQ(got.calls.size(), want.calls.size()) << what;
  for (size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, want.calls[i].first) << what;
    EXPECT_EQ(json::parse(got.calls[i].arguments), want.calls[i].second) << what;
    EXPECT_FALSE(got.calls[i].id.empty());
  }
}

// Whole and in 50 random chunkings: the same content and calls.
void ExpectBothWays(Syntax syntax, const std::string& text, const Expected& want) {
  ExpectParsed(ParseAll(syntax, text), want, "whole: " + text);
  for (uint32_t seed = 0; seed < 50; ++seed)
    ExpectParsed(ParseInPieces(syntax, text, seed), want, "seed " + std::to_string(seed) + ": " + text);
}

TEST(ToolCallParsers, Hermes) {
  const json paris = {{"city", "Paris"}}, unit = {{"unit", "C"}, {"nested", {{"a", "}{"}}}};
  ExpectBothWays(Syntax::kHermes,
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                 {"", {{"get_weather", paris}}});
  ExpectBothWays(Syntax::kHermes,
                 "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"city\": \"Paris\"}}\n"
                 "</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"unit\": \"C\", "
                 "\"nested\": {\"a\": \"}{\"}}}\n</tool_call>\n",
                 {"Let me check.\n", {{"a", paris}, {"b", unit}}});
  // Plain text, including a '<' that is not a call.
  ExpectBothWays(Syntax::kHermes, "1 < 2 and <b>bold</b>", {"1 < 2 and <b>bold</b>", {}});
  // Malformed JSON and an unknown shape come back as text, tags included.
  ExpectBothWays(Syntax::kHermes, "x<tool_call>\n{\"name\": \"a\", \"arguments\": {\"city\": }\n</tool_call>",
                 {"x<tool_call>\n{\"name\": \"a\", \"arguments\": {\"city\": }\n</tool_call>", {}});
  ExpectBothWays(Syntax::kHermes, "<tool_call>[1, 2]</tool_call>", {"<tool_call>[1, 2]</tool_call>", {}});
  // Cut off by the stop token before "</tool_call>": whole JSON still counts.
  ExpectBothWays(Syntax::kHermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n",
                 {"", {{"a", json::object()}}});
  ExpectBothWays(Syntax::kHermes, "<tool_call>\n{\"name\": \"a\", \"argu",
                 {"<tool_call>\n{\"name\": \"a\", \"argu", {}});
  // Arguments written as a JSON string are accepted as the object they hold.
  ExpectBothWays(Syntax::kHermes, "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>",
                 {"", {{"a", {{"x", 1}}}}});
  // Text after the calls is content; a lone "<tool" at the end is too.
  ExpectBothWays(Syntax::kHermes, "<tool_call>{\"name\": \"a\"}</tool_call>\nDone <tool",
                 {"\nDone <tool", {{"a", json::object()}}});
}

TEST(ToolCallParsers, HermesHoldsBackMarkerTextWhileStreaming) {
  const std::string text =
      "Sure <tool_call>\n{\"name\": \"a\", \"arguments\": {\"q\": \"<tool_call>\"}}\n</tool_call>";
  for (uint32_t seed = 0; seed < 50; ++seed) {
    std::vector<std::string> contents;
    ParsedText p = ParseInPieces(Syntax::kHermes, text, seed, &contents);
    std::string streamed;
    for (const std::string& c : contents) {
      streamed += c;
      EXPECT_EQ(streamed.find('<'), std::string::npos) << "seed " << seed << ": " << streamed;
    }
    EXPECT_EQ(streamed, "Sure ");
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(json::parse(p.calls[0].arguments), json({{"q", "<tool_call>"}}));
  }
}

TEST(ToolCallParsers, Llama3) {
  const json paris = {{"city", "Paris"}};
  ExpectBothWays(Syntax::kLlama3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                 {"", {{"get_weather", paris}}});
  ExpectBothWays(Syntax::kLlama3,
                 " <|python_tag|>{\"name\": \"a\", \"parameters\": {\"city\": \"Paris\"}}; "
                 "{\"name\": \"b\", \"arguments\": {}}",
                 {"", {{"a", paris}, {"b", json::object()}}});
  // An answer that does not open with a call is text, braces and all.
  ExpectBothWays(Syntax::kLlama3, "The JSON is {\"name\": \"a\", \"parameters\": {}}",
                 {"The JSON is {\"name\": \"a\", \"parameters\": {}}", {}});
  // JSON that is not a call, and malformed JSON, are text.
  ExpectBothWays(Syntax::kLlama3, "{\"answer\": 42}", {"{\"answer\": 42}", {}});
  ExpectBothWays(Syntax::kLlama3, "{\"name\": \"a\", \"parameters\": {\"x\": }",
                 {"{\"name\": \"a\", \"parameters\": {\"x\": }", {}});
  ExpectBothWays(Syntax::kLlama3, "<|python", {"<|python", {}});
}

TEST(ToolCallParsers, Mistral) {
  const json paris = {{"city", "Paris"}};
  ExpectBothWays(Syntax::kMistral,
                 "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"city\": \"Paris\"}}, "
                 "{\"name\": \"b\", \"arguments\": {}}]",
                 {"", {{"a", paris}, {"b", json::object()}}});
  ExpectBothWays(Syntax::kMistral,
                 "Checking. [TOOL_CALLS]a[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]b[ARGS]{}",
                 {"Checking. ", {{"a", paris}, {"b", json::object()}}});
  ExpectBothWays(Syntax::kMistral, "[1] is a list [TOOL", {"[1] is a list [TOOL", {}});
  ExpectBothWays(Syntax::kMistral, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": 3}]",
                 {"[TOOL_CALLS][{\"name\": \"a\", \"arguments\": 3}]", {}});
  ExpectBothWays(Syntax::kMistral, "[TOOL_CALLS][{\"name\": \"a\"", {"[TOOL_CALLS][{\"name\": \"a\"", {}});
  // Mistral's templates want 9-character ids.
  ParsedText p = ParseAll(Syntax::kMistral, "[TOOL_CALLS]a[ARGS]{}");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].id.size(), 9u);
  EXPECT_EQ(ParseAll(Syntax::kHermes, "<tool_call>{\"name\": \"a\"}</tool_call>").calls[0].id.rfind("call_", 0), 0u);
}

// Random texts made of the syntaxes' pieces (markers, braces, quotes,
// escapes, separators, half markers): every parser, whole or in random
// pieces, gives the same content and calls, never crashes, and loses no
// text when it finds no call.
TEST(ToolCallParsers, RandomTextsParseTheSameWholeAndStreamed) {
  const std::vector<std::string> pieces = {
      "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<tool",
      "[TOOL", "{", "}", "[", "]", "\"", "\\", ":", ",", ";", " ", "\n", "\"name\"",
      "\"arguments\"", "\"parameters\"", "\"f\"", "1", "x", "é", "{\"tool_calls\": [",
      "{\"tool_call\": "};
  std::mt19937 rng(7);
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int n = 1 + rng() % 30;
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    for (Syntax syntax : {Syntax::kHermes, Syntax::kLlama3, Syntax::kMistral, Syntax::kGeneric}) {
      const ParsedText whole = ParseAll(syntax, text);
      const ParsedText streamed = ParseInPieces(syntax, text, round);
      ASSERT_EQ(whole.content, streamed.content) << SyntaxName(syntax) << ": " << text;
      ASSERT_EQ(whole.calls.size(), streamed.calls.size()) << SyntaxName(syntax) << ": " << text;
      for (size_t i = 0; i < whole.calls.size(); ++i) {
        EXPECT_EQ(whole.calls[i].name, streamed.calls[i].name);
        EXPECT_EQ(whole.calls[i].arguments, streamed.calls[i].arguments);
        EXPECT_TRUE(json::parse(whole.calls[i].arguments).is_object());
      }
      if (whole.calls.empty()) {
        EXPECT_EQ(whole.content, text) << SyntaxName(syntax);
      }
    }
  }
}

// The generic form (generic_prompt.h): the whole answer is the reply of
// calls, or it is text.
TEST(ToolCallParsers, Generic) {
  const json paris = {{"city", "Paris"}};
  ExpectBothWays(Syntax::kGeneric,
                 "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}",
                 {"", {{"get_weather", paris}}});
  ExpectBothWays(Syntax::kGeneric,
                 " \n{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"city\": \"Paris\"}},"
                 " {\"name\": \"b\", \"arguments\": {}}]}\n",
                 {"", {{"a", paris}, {"b", json::object()}}});
  // llama.cpp's older single-call object.
  ExpectBothWays(Syntax::kGeneric, "{\"tool_call\": {\"name\": \"b\", \"arguments\": {}}}",
                 {"", {{"b", json::object()}}});
  // Text, JSON that is not a reply of calls, a first entry that is not a
  // call, and a cut-off call: all content, as written.
  ExpectBothWays(Syntax::kGeneric, "It is {sunny} in Paris.", {"It is {sunny} in Paris.", {}});
  ExpectBothWays(Syntax::kGeneric, "{\"answer\": 42}", {"{\"answer\": 42}", {}});
  ExpectBothWays(Syntax::kGeneric, "{\"tool_calls\": [{\"arguments\": {}}, {\"name\": \"a\", \"arguments\": {}}]}",
                 {"{\"tool_calls\": [{\"arguments\": {}}, {\"name\": \"a\", \"arguments\": {}}]}", {}});
  // An entry that is not a call ends the calls; the text from it on is content.
  ExpectBothWays(Syntax::kGeneric, "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}, {\"arguments\": {}}]}",
                 {" {\"arguments\": {}}]}", {{"a", json::object()}}});
  // An object cut off after its calls: the calls count, the brackets are the syntax's.
  ExpectBothWays(Syntax::kGeneric, "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {\"x\": 1}}",
                 {"", {{"a", {{"x", 1}}}}});
  ExpectBothWays(Syntax::kGeneric, "{\"tool_calls\": [{\"name\": \"a\", \"argu",
                 {"{\"tool_calls\": [{\"name\": \"a\", \"argu", {}});
  ExpectBothWays(Syntax::kGeneric, "{\"tool_calls\": [], \"x\": 1}", {"{\"tool_calls\": [], \"x\": 1}", {}});
  // Text after the calls is content; the whitespace around them is not.
  ExpectBothWays(Syntax::kGeneric, "{\"tool_calls\": [{\"name\": \"a\", \"arguments\": {}}]}\n\nDone.",
                 {"\n\nDone.", {{"a", json::object()}}});
  // Streamed text goes out as it comes, not at the end.
  auto parser = MakeParser(Syntax::kGeneric);
  EXPECT_EQ(parser->Push("  ").content, "");
  EXPECT_EQ(parser->Push("Hel").content, "  Hel");
  EXPECT_EQ(parser->Push("lo").content, "lo");
}

// A parser asked to stream arguments, fed token-sized pieces (1 to 3
// bytes) of `text`: everything it gave, the argument pieces of each call,
// and what content (in how many pieces) went out before the first call did.
struct StreamedArguments {
  ParsedText all;
  std::map<int, std::vector<std::string>> pieces;  // call index -> argument deltas
  std::string content_before_calls;
  int content_pushes_before_calls = 0;
};

StreamedArguments StreamInTokens(Syntax syntax, std::string_view text, uint32_t seed) {
  std::mt19937 rng(seed);
  auto parser = MakeParser(syntax);
  EXPECT_TRUE(parser->StreamArguments()) << SyntaxName(syntax);
  StreamedArguments s;
  auto take = [&](ParsedText p) {
    if (s.all.deltas.empty() && !p.content.empty()) {
      s.content_before_calls += p.content;  // a push's content comes before its calls
      ++s.content_pushes_before_calls;
    }
    for (const CallDelta& d : p.deltas)
      if (!d.arguments.empty()) s.pieces[d.index].push_back(d.arguments);
    s.all.Append(std::move(p));
  };
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::min<size_t>(1 + rng() % 3, text.size() - at);
    take(parser->Push(text.substr(at, n)));
    at += n;
  }
  take(parser->Finish());
  return s;
}

// Each call's deltas: named first (id and name, arguments ""), done last,
// and the pieces between concatenate to exactly the call's arguments.
void ExpectDeltasMakeTheCalls(const ParsedText& p, const std::string& what) {
  std::map<int, std::string> args, ids, names;
  std::map<int, bool> done;
  for (const CallDelta& d : p.deltas) {
    ASSERT_FALSE(done[d.index]) << what << ": a delta after the call was done";
    if (!d.id.empty()) {
      EXPECT_FALSE(ids.count(d.index)) << what;
      EXPECT_TRUE(d.arguments.empty()) << what;
      ids[d.index] = d.id;
      names[d.index] = d.name;
    } else {
      ASSERT_TRUE(ids.count(d.index)) << what << ": arguments before the call was named";
    }
    args[d.index] += d.arguments;
    done[d.index] = d.done;
  }
  ASSERT_EQ(ids.size(), p.calls.size()) << what;
  for (size_t i = 0; i < p.calls.size(); ++i) {
    const int index = static_cast<int>(i);
    EXPECT_TRUE(done[index]) << what;
    EXPECT_EQ(ids[index], p.calls[i].id) << what;
    EXPECT_EQ(names[index], p.calls[i].name) << what;
    EXPECT_EQ(args[index], p.calls[i].arguments) << what;
  }
}

// Real answers of each family, streamed in token-sized pieces: the
// arguments go out in several deltas per call while they are generated,
// concatenating to the non-streamed arguments; the text before a call
// streams before it.
TEST(ToolCallParsers, ArgumentsStreamAsTheyAreGenerated) {
  struct Case {
    Syntax syntax;
    std::string text;
    std::string content;
  };
  const Case cases[] = {
      {Syntax::kHermes,
       "I'll check the weather for you.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
       "{\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
       "\"get_time\", \"arguments\": {\"timezone\": \"Europe/Paris\"}}\n</tool_call>",
       "I'll check the weather for you.\n"},
      {Syntax::kLlama3,
       "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco, CA\", "
       "\"unit\": \"fahrenheit\"}}; {\"name\": \"get_time\", \"parameters\": {\"tz\": \"PST\"}}",
       ""},
      {Syntax::kMistral,
       "Let me look that up. [TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Paris\", \"days\": [1, 2, {\"note\": \"}]\"}]}}, {\"name\": \"get_time\", \"arguments\": "
       "{\"tz\": \"CET\"}}]",
       "Let me look that up. "},
      {Syntax::kMistral,
       "Checking now. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"unit\": \"celsius\"}"
       "[TOOL_CALLS]get_time[ARGS]{\"tz\": \"CET\"}",
       "Checking now. "},
      {Syntax::kGeneric,
       "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
       "\"unit\": \"celsius\"}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]}",
       ""},
  };
  for (const Case& c : cases) {
    const ParsedText whole = ParseAll(c.syntax, c.text);
    ASSERT_EQ(whole.calls.size(), 2u) << c.text;
    EXPECT_EQ(whole.content, c.content);
    for (uint32_t seed = 0; seed < 20; ++seed) {
      const std::string what = std::string(SyntaxName(c.syntax)) + " seed " + std::to_string(seed);
      const StreamedArguments s = StreamInTokens(c.syntax, c.text, seed);
      ExpectDeltasMakeTheCalls(s.all, what);
      EXPECT_EQ(s.all.content, c.content) << what;
      ASSERT_EQ(s.all.calls.size(), 2u) << what;
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(s.all.calls[i].name, whole.calls[i].name) << what;
        EXPECT_EQ(s.all.calls[i].arguments, whole.calls[i].arguments) << what;
        EXPECT_GT(s.pieces.at(i).size(), 1u) << what << ": call " << i << " in one delta";
      }
      // The text before the calls went out before them, as it came.
      EXPECT_EQ(s.content_before_calls, c.content) << what;
      if (!c.content.empty()) {
        EXPECT_GT(s.content_pushes_before_calls, 1) << what;
      }
    }
  }
  // The arguments are the model's own text, as written.
  EXPECT_EQ(ParseAll(Syntax::kHermes, cases[0].text).calls[0].arguments,
            "{\"city\": \"Paris\", \"unit\": \"celsius\"}");
}

// Streamed arguments on random texts: every call that was named ends as a
// call whose arguments are its deltas' concatenation, and the content is
// the non-streamed parse's (a streamed call whose JSON broke is given back
// as content too).
TEST(ToolCallParsers, StreamedArgumentsOnRandomTexts) {
  const std::vector<std::string> pieces = {
      "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "{", "}", "[", "]",
      "\"", "\\", ":", ",", " ", "\"name\"", "\"arguments\"", "\"parameters\"", "\"f\"", "1", "x",
      "{\"tool_calls\": ["};
  std::mt19937 rng(11);
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int n = 1 + rng() % 30;
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    for (Syntax syntax : {Syntax::kHermes, Syntax::kLlama3, Syntax::kMistral, Syntax::kGeneric}) {
      const std::string what = std::string(SyntaxName(syntax)) + ": " + text;
      const StreamedArguments s = StreamInTokens(syntax, text, round);
      ExpectDeltasMakeTheCalls(s.all, what);
      const ParsedText whole = ParseAll(syntax, text);
      EXPECT_EQ(s.all.content, whole.content) << what;
      EXPECT_GE(s.all.calls.size(), whole.calls.size()) << what;
    }
  }
}

TEST(ToolCallParsers, NoneIsText) {
  ExpectBothWays(Syntax::kNone, "<tool_call>{\"name\": \"a\"}</tool_call>",
                 {"<tool_call>{\"name\": \"a\"}</tool_call>", {}});
}

std::string TemplateSource(const std::string& name) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::FromFile(SourcePath("tests/data/jinja/templates/" + name + ".jinja"), "", "");
  EXPECT_TRUE(t.ok()) << name << ": " << t.status();
  return t.ok() ? t->tools_source() : "";
}

TEST(ToolCallSyntax, ReadFromTheRealTemplates) {
  const std::pair<const char*, Syntax> cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct", Syntax::kHermes},
      {"Qwen-Qwen3-0.6B", Syntax::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", Syntax::kHermes},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", Syntax::kHermes},
      {"meta-llama-Llama-3.1-8B-Instruct", Syntax::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct", Syntax::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct", Syntax::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407", Syntax::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506", Syntax::kMistral},
      {"Qwen-QwQ-32B", Syntax::kHermes},
      {"ibm-granite-granite-4.0", Syntax::kHermes},
      {"unsloth-mistral-Devstral-Small-2507", Syntax::kMistral},
      {"mistralai-Ministral-3-14B-Reasoning-2512", Syntax::kMistral},
      // XML inside <tool_call>, and Gemma 4's own call syntax: no parser.
      {"Qwen3-Coder", Syntax::kNone},
      {"GLM-4.6", Syntax::kNone},
      {"google-gemma-4-31B-it", Syntax::kNone},
      {"microsoft-Phi-3.5-mini-instruct", Syntax::kNone},
      {"google-gemma-2-2b-it", Syntax::kNone},
      {"specline-chatml", Syntax::kNone},
  };
  for (const auto& [name, syntax] : cases)
    EXPECT_EQ(SyntaxFromTemplate(TemplateSource(name)), syntax) << name;
  EXPECT_TRUE(TemplateReadsTools(TemplateSource("Qwen-Qwen2.5-7B-Instruct")));
  EXPECT_FALSE(TemplateReadsTools(TemplateSource("microsoft-Phi-3.5-mini-instruct")));
  EXPECT_FALSE(TemplateReadsTools("{{ builtin_tools }}{{ my_tools_x }}"));

  bool is_auto = false;
  std::string error;
  EXPECT_EQ(SyntaxFromFlag("llama3", &is_auto, &error), Syntax::kLlama3);
  EXPECT_FALSE(SyntaxFromFlag("auto", &is_auto, &error));
  EXPECT_TRUE(is_auto);
  EXPECT_FALSE(SyntaxFromFlag("qwen", &is_auto, &error));
  EXPECT_NE(error.find("qwen"), std::string::npos);
  EXPECT_THROW(ResolveToolCallSupport("qwen", nullptr, nullptr), std::invalid_argument);

  // Whether a template without tools takes a system turn (where the
  // generic tool form writes its instructions): Gemma 2's raises on one.
  for (const auto& [name, takes] : {std::pair{"google-gemma-2-2b-it", false}, {"specline-chatml", true},
                                    {"microsoft-Phi-3.5-mini-instruct", true}}) {
    absl::StatusOr<ChatTemplate> t =
        ChatTemplate::FromFile(SourcePath(std::string("tests/data/jinja/templates/") + name + ".jinja"), "", "");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(ResolveToolCallSupport("auto", &*t, nullptr).template_takes_system, takes) << name;
  }
}

// A control token prints as nothing; MarkedText puts the marker back
// where the token stood. SmolLM2's <|im_end|> stands in for [TOOL_CALLS]
// (a real control token of a real vocabulary).
TEST(ToolCallSyntax, MarkerTokensArePutBackIntoTheText) {
  ASSERT_FALSE(SmolLm2Path().empty()) << "SmolLM2 is fetched by scripts/setup.sh";
  auto model = OpenModel(SmolLm2Path());
  auto tok = OpenTokenizerFor(*model);
  const std::vector<int32_t> ids = tok->Encode("Hi there<|im_end|>[{\"a\": 1}]", false, true);
  const std::vector<int32_t> end = tok->Encode("<|im_end|>", false, true);
  ASSERT_EQ(end.size(), 1u);
  ASSERT_TRUE(tok->TokenBytes(-1, end[0]).empty());
  IncrementalDetokenizer detok(*tok);
  std::string text;
  for (int32_t id : ids) text += detok.Push(id);
  text += detok.Flush();
  ASSERT_EQ(text, "Hi there[{\"a\": 1}]");
  const std::vector<MarkerToken> markers = {{end[0], "[TOOL_CALLS]"}};
  EXPECT_EQ(MarkedText(markers, tok.get(), ids.data(), static_cast<int>(ids.size()), text),
            "Hi there[TOOL_CALLS][{\"a\": 1}]");
  EXPECT_EQ(MarkedText({}, tok.get(), ids.data(), static_cast<int>(ids.size()), text), text);
}

constexpr char kToolsText[] = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}])";
const json kTools = json::parse(kToolsText);

TEST(ToolCallSchema, EnforcesOneCallInTheFamilysSyntax) {
  ToolCallSupport hermes{Syntax::kHermes, true, false, "", {}};
  absl::StatusOr<v1::ResponseFormat> f = ForcedCallFormat(hermes, kTools, "get_weather");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->prefix(), "<tool_call>\n");
  EXPECT_EQ(f->suffix(), "\n</tool_call>");
  EXPECT_EQ(json::parse(f->json_schema()),
            json::parse(R"({"type": "object", "properties": {"name": {"const": "get_weather"},
              "arguments": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}},
              "required": ["name", "arguments"], "additionalProperties": false})"));

  f = ForcedCallFormat(hermes, kTools, "");  // "required": any of them
  ASSERT_TRUE(f.ok()) << f.status();
  const json any = json::parse(f->json_schema());
  ASSERT_EQ(any["anyOf"].size(), 2u);
  EXPECT_EQ(any["anyOf"][1]["properties"]["name"]["const"], "now");
  EXPECT_EQ(any["anyOf"][1]["properties"]["arguments"]["type"], "object");

  f = ForcedCallFormat({Syntax::kLlama3, true, false, "", {}}, kTools, "now");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->prefix().empty());
  EXPECT_TRUE(json::parse(f->json_schema())["properties"].contains("parameters"));

  f = ForcedCallFormat({Syntax::kMistral, true, false, "", {}}, kTools, "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->prefix(), "[TOOL_CALLS]");
  EXPECT_EQ(json::parse(f->json_schema())["type"], "array");

  f = ForcedCallFormat({Syntax::kMistral, true, true, "", {}}, kTools, "get_weather");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->prefix(), "[TOOL_CALLS]get_weather[ARGS]");
  EXPECT_EQ(json::parse(f->json_schema()), kTools[0]["function"]["parameters"]);
  EXPECT_FALSE(ForcedCallFormat({Syntax::kMistral, true, true, "", {}}, kTools, "").ok());
  EXPECT_FALSE(ForcedCallFormat(hermes, kTools, "missing").ok());
  EXPECT_FALSE(ForcedCallFormat({Syntax::kNone, true, false, "", {}}, kTools, "now").ok());
}

TEST(ToolCallSchema, GenericFormIsOneObjectOfCalls) {
  absl::StatusOr<v1::ResponseFormat> f = ForcedCallFormat({Syntax::kGeneric, false, false, "", {}}, kTools, "");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->prefix().empty());
  const json schema = json::parse(f->json_schema());
  EXPECT_EQ(schema["required"], json({"tool_calls"}));
  EXPECT_EQ(schema["additionalProperties"], false);
  const json& list = schema["properties"]["tool_calls"];
  EXPECT_EQ(list["minItems"], 1);
  ASSERT_EQ(list["items"]["anyOf"].size(), 2u);
  EXPECT_EQ(list["items"]["anyOf"][0]["properties"]["arguments"], kTools[0]["function"]["parameters"]);
  f = ForcedCallFormat({Syntax::kGeneric, false, false, "", {}}, kTools, "now");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(json::parse(f->json_schema())["properties"]["tool_calls"]["items"]["properties"]["name"]["const"], "now");

  EXPECT_FALSE(list.contains("maxItems"));
  f = ForcedCallFormat({Syntax::kGeneric, false, false, "", {}}, kTools, "", /*one_call=*/true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(json::parse(f->json_schema())["properties"]["tool_calls"]["maxItems"], 1);
  // The name before the arguments: the grammar writes them in this order.
  EXPECT_LT(f->json_schema().find("\"name\""), f->json_schema().find("\"arguments\""));

  // "auto": one EBNF grammar, text or the object (grammar_test walks it).
  f = GenericAutoFormat(kTools, /*one_call=*/true);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->has_ebnf());
  EXPECT_NE(f->ebnf().find("tool_calls"), std::string::npos);
  json bad = kTools;
  bad[0]["function"]["parameters"]["properties"]["city"]["type"] = "no-such-type";
  EXPECT_FALSE(GenericAutoFormat(bad, true).ok());
}

TEST(GenericPrompt, ToolsGoIntoTheSystemMessageAndPastCallsBecomeText) {
  v1::ChatMessages chat;
  auto add = [&](const char* role, const std::string& content) {
    v1::ChatMessage* m = chat.add_messages();
    m->set_role(role);
    m->set_content(content);
    return m;
  };
  add("user", "Weather in Paris?");
  v1::ChatMessage* call = add("assistant", "");
  call->set_content_null(true);
  call->set_tool_calls_json(R"([{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}])");
  add("tool", "22 C")->set_tool_call_id("call_1");
  chat.set_tools_json(kTools.dump());
  v1::ChatMessages no_tools = chat;

  v1::ChatMessages no_system = chat;
  RewriteForGenericTools(&kTools, true, &chat);
  ASSERT_EQ(chat.messages_size(), 4);
  EXPECT_TRUE(chat.tools_json().empty());
  EXPECT_EQ(chat.messages(0).role(), "system");
  EXPECT_EQ(chat.messages(0).content(), GenericToolInstructions(kTools));
  for (const char* want : {"\"name\":\"get_weather\"", "\"description\":\"Weather in a city\"",
                           "\"name\":\"now\",\"parameters\":{\"properties\":{},\"type\":\"object\"}",
                           "{\"tool_calls\": [{\"name\": \"<function name>\""}) {
    EXPECT_NE(chat.messages(0).content().find(want), std::string::npos) << want << "\n" << chat.messages(0).content();
  }
  EXPECT_EQ(chat.messages(1).content(), "Weather in Paris?");
  EXPECT_FALSE(chat.messages(2).content_null());
  EXPECT_TRUE(chat.messages(2).tool_calls_json().empty());
  EXPECT_EQ(json::parse(chat.messages(2).content()),
            json::parse(R"({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]})"));
  EXPECT_EQ(chat.messages(3).role(), "user");
  EXPECT_EQ(json::parse(chat.messages(3).content()),
            json::parse(R"({"tool_response": {"tool_call_id": "call_1", "content": "22 C"}})"));

  // A client's system message keeps its text first; tool_choice "none"
  // (no tools given) rewrites the history alone.
  v1::ChatMessages with_system;
  with_system.add_messages()->set_role("system");
  with_system.mutable_messages(0)->set_content("Be brief.");
  RewriteForGenericTools(&kTools, true, &with_system);
  ASSERT_EQ(with_system.messages_size(), 1);
  EXPECT_EQ(with_system.messages(0).content(), "Be brief.\n\n" + GenericToolInstructions(kTools));
  RewriteForGenericTools(nullptr, true, &no_tools);
  ASSERT_EQ(no_tools.messages_size(), 3);
  EXPECT_EQ(no_tools.messages(0).role(), "user");
  EXPECT_EQ(no_tools.messages(2).role(), "user");
  // A template that refuses system turns: before the first user's text.
  RewriteForGenericTools(&kTools, false, &no_system);
  ASSERT_EQ(no_system.messages_size(), 3);
  EXPECT_EQ(no_system.messages(0).role(), "user");
  EXPECT_EQ(no_system.messages(0).content(), GenericToolInstructions(kTools) + "\n\nWeather in Paris?");
}

}  // namespace
}  // namespace specline::tool_calls

namespace specline::openai {
namespace {

using nlohmann::json;
using testing::SmolLm2Path;
using testing::SourcePath;

json Chat(json extra) {
  json body = {{"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})}};
  body.update(extra);
  return body;
}

std::optional<ApiError> Parse(const json& body, ParsedRequest* out) {
  return ParseRequest(Endpoint::kChatCompletions, body.dump(), out);
}

TEST(ToolRequests, ToolsAndToolChoiceAreRead) {
  ParsedRequest p;
  ASSERT_FALSE(Parse(Chat({{"tools", tool_calls::kTools}, {"parallel_tool_calls", false}}), &p));
  EXPECT_EQ(p.tools.choice, ToolRequest::Choice::kAuto);
  EXPECT_FALSE(p.tools.parallel_tool_calls);
  EXPECT_EQ(json::parse(p.request.chat().tools_json()), tool_calls::kTools);

  for (const auto& [choice, want] :
       std::vector<std::pair<json, ToolRequest::Choice>>{
           {"none", ToolRequest::Choice::kNone},
           {"auto", ToolRequest::Choice::kAuto},
           {"required", ToolRequest::Choice::kRequired},
           {{{"type", "function"}, {"function", {{"name", "now"}}}}, ToolRequest::Choice::kFunction}}) {
    ParsedRequest q;
    ASSERT_FALSE(Parse(Chat({{"tools", tool_calls::kTools}, {"tool_choice", choice}}), &q)) << choice;
    EXPECT_EQ(q.tools.choice, want) << choice;
  }
  ParsedRequest none;
  ASSERT_FALSE(Parse(Chat({{"tool_choice", "auto"}}), &none));  // auto without tools: no tools
  EXPECT_EQ(none.tools.choice, ToolRequest::Choice::kNone);
}

TEST(ToolRequests, BadToolsAreRefusedByName) {
  const json weather = tool_calls::kTools[0];
  const std::pair<json, const char*> cases[] = {
      {{{"tools", "x"}}, "tools"},
      {{{"tools", {{{"type", "code_interpreter"}}}}}, "tools[0].type"},
      {{{"tools", {{{"type", "function"}}}}}, "tools[0].function"},
      {{{"tools", {{{"type", "function"}, {"function", {{"name", "has space"}}}}}}}, "tools[0].function.name"},
      {{{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", "x"}}}}}}},
       "tools[0].function.parameters"},
      {{{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "string"}}}}}}}}},
       "tools[0].function.parameters.type"},
      {{{"tools", {weather, weather}}}, "tools[1].function.name"},
      {{{"tool_choice", "required"}}, "tool_choice"},
      {{{"tools", {weather}}, {"tool_choice", "sometimes"}}, "tool_choice"},
      {{{"tools", {weather}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "now"}}}}}},
       "tool_choice"},
      {{{"tools", {weather}}, {"parallel_tool_calls", "yes"}}, "parallel_tool_calls"},
  };
  for (const auto& [extra, param] : cases) {
    ParsedRequest p;
    std::optional<ApiError> e = Parse(Chat(extra), &p);
    ASSERT_TRUE(e) << extra;
    EXPECT_EQ(e->param, param) << e->message;
    EXPECT_EQ(e->http_status, 400);
  }
}

constexpr char kToolConversationText[] = R"([
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
  {"role": "tool", "tool_call_id": "call_1", "content": "22 C and sunny"}])";
const json kToolConversation = json::parse(kToolConversationText);

TEST(ToolRequests, ToolMessagesAreCarried) {
  ParsedRequest p;
  ASSERT_FALSE(Parse({{"messages", kToolConversation}, {"tools", tool_calls::kTools}}, &p));
  const auto& m = p.request.chat().messages();
  ASSERT_EQ(m.size(), 3);
  EXPECT_TRUE(m[1].content_null());
  EXPECT_EQ(json::parse(m[1].tool_calls_json()), kToolConversation[1]["tool_calls"]);
  EXPECT_EQ(m[2].tool_call_id(), "call_1");

  json bad = kToolConversation;
  bad[2].erase("tool_call_id");
  ApiError e = Parse({{"messages", bad}}, &p).value_or(ApiError{});
  EXPECT_EQ(e.param, "messages[2].tool_call_id");
  bad = kToolConversation;
  bad[0]["tool_calls"] = bad[1]["tool_calls"];
  EXPECT_EQ(Parse({{"messages", bad}}, &p).value_or(ApiError{}).param, "messages[0].tool_calls");
  bad = kToolConversation;
  bad[0]["content"] = nullptr;  // only the assistant may omit content
  EXPECT_EQ(Parse({{"messages", bad}}, &p).value_or(ApiError{}).param, "messages[0].content");
}

TEST(ToolRequests, ToolChoiceAgainstTheServedModel) {
  using tool_calls::Syntax;
  const tool_calls::ToolCallSupport qwen{Syntax::kHermes, true, false, "qwen.jinja", {}};
  const tool_calls::ToolCallSupport plain{Syntax::kNone, false, false, "smol.jinja", {}};
  const tool_calls::ToolCallSupport unknown{Syntax::kNone, true, false, "odd.jinja", {}};
  auto apply = [](const json& extra, const tool_calls::ToolCallSupport& s, ParsedRequest* p,
                  Syntax* parse_with) {
    EXPECT_FALSE(Parse(Chat(extra), p));
    return ApplyToolChoice(p->tools, s, &p->request, parse_with);
  };
  Syntax with;
  ParsedRequest p;
  EXPECT_FALSE(apply({{"tools", tool_calls::kTools}}, qwen, &p, &with));
  EXPECT_EQ(with, Syntax::kHermes);
  EXPECT_FALSE(p.request.has_response_format());

  // A template without tools: the generic form, "auto" held to text or
  // the reply of calls by grammar.
  p = {};
  EXPECT_FALSE(apply({{"tools", tool_calls::kTools}}, plain, &p, &with));
  EXPECT_EQ(with, Syntax::kGeneric);
  EXPECT_TRUE(p.request.chat().tools_json().empty());
  EXPECT_EQ(p.request.chat().messages(0).role(), "system");
  EXPECT_TRUE(p.request.response_format().has_ebnf());
  p = {};
  EXPECT_FALSE(apply({{"tools", tool_calls::kTools}, {"tool_choice", "required"}}, plain, &p, &with));
  EXPECT_EQ(with, Syntax::kGeneric);
  const json calls = json::parse(p.request.response_format().json_schema())["properties"]["tool_calls"];
  EXPECT_EQ(calls["maxItems"], 1);  // one call, unless parallel_tool_calls is asked for
  p = {};
  EXPECT_FALSE(apply({{"tools", tool_calls::kTools}, {"tool_choice", "required"}, {"parallel_tool_calls", true}},
                     plain, &p, &with));
  EXPECT_FALSE(json::parse(p.request.response_format().json_schema())["properties"]["tool_calls"].contains("maxItems"));
  // The client's response_format, or a policy without grammars: parsed, not held.
  p = {};
  EXPECT_FALSE(apply({{"tools", tool_calls::kTools}, {"policy", "ptp"}}, plain, &p, &with));
  EXPECT_EQ(with, Syntax::kGeneric);
  EXPECT_FALSE(p.request.has_response_format());
  std::optional<ApiError> e;
  p = {};
  EXPECT_TRUE(apply({{"tools", tool_calls::kTools}}, unknown, &p, &with));

  // "none": nothing parsed; the tools stay in the prompt where the template
  // renders them, and are dropped where it cannot.
  p = {};
  EXPECT_FALSE(apply({{"tools", tool_calls::kTools}, {"tool_choice", "none"}}, qwen, &p, &with));
  EXPECT_EQ(with, Syntax::kNone);
  EXPECT_FALSE(p.request.chat().tools_json().empty());
  p = {};
  EXPECT_FALSE(apply({{"tools", tool_calls::kTools}, {"tool_choice", "none"}}, plain, &p, &with));
  EXPECT_TRUE(p.request.chat().tools_json().empty());

  p = {};
  EXPECT_FALSE(apply({{"tools", tool_calls::kTools}, {"tool_choice", "required"}}, qwen, &p, &with));
  EXPECT_EQ(with, Syntax::kHermes);
  ASSERT_TRUE(p.request.has_response_format());
  EXPECT_EQ(p.request.response_format().prefix(), "<tool_call>\n");
  EXPECT_EQ(json::parse(p.request.response_format().json_schema())["anyOf"].size(), 2u);

  p = {};
  p.request.mutable_response_format()->set_json_object(true);
  EXPECT_FALSE(Parse(Chat({{"tools", tool_calls::kTools}, {"tool_choice", "required"}}), &p));
  p.request.mutable_response_format()->set_json_object(true);
  e = ApplyToolChoice(p.tools, qwen, &p.request, &with);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "response_format");
}

ServedModel QwenTemplatedSmolLm2(std::unique_ptr<Tokenizer>* tokenizer) {
  auto model = OpenModel(SmolLm2Path());
  *tokenizer = OpenTokenizerFor(*model);
  ServedModel m;
  m.tokenizer = tokenizer->get();
  absl::StatusOr<ChatTemplate> t = ChatTemplateFromFile(
      SourcePath("tests/data/jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja"), tokenizer->get());
  EXPECT_TRUE(t.ok()) << t.status();
  m.chat_template = *std::move(t);
  m.tool_calls = tool_calls::ResolveToolCallSupport("auto", &*m.chat_template, m.tokenizer);
  m.vocab_size = (*tokenizer)->vocab_size();
  m.context_length = 2048;
  return m;
}

// The prompt the Qwen2.5 template renders, byte for byte as transformers renders it: the
// tools in the system prompt, the past call with its arguments an object,
// the tool's result as a <tool_response>.
TEST(ToolRequests, TheTemplateRendersToolsAndToolMessages) {
  ASSERT_FALSE(SmolLm2Path().empty()) << "SmolLM2 is fetched by scripts/setup.sh";
  std::unique_ptr<Tokenizer> tokenizer;
  const ServedModel m = QwenTemplatedSmolLm2(&tokenizer);
  EXPECT_EQ(m.tool_calls.syntax, tool_calls::Syntax::kHermes);
  // The body as a client sends it: the keys in its order, which the prompt keeps.
  ParsedRequest p;
  ASSERT_FALSE(ParseRequest(Endpoint::kChatCompletions,
                            std::string("{\"messages\": ") + kToolConversationText +
                                ", \"tools\": " + tool_calls::kToolsText + "}",
                            &p));
  absl::StatusOr<std::string> prompt = RenderChat(p.request.chat(), m);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  // transformers' apply_chat_template (jinja2) on the same conversation,
  // with the call's arguments an object (as vLLM hands them over).
  EXPECT_EQ(*prompt, R"(<|im_start|>system
You are Qwen, created by Alibaba Cloud. You are a helpful assistant.

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
{"type": "function", "function": {"name": "now"}}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Weather in Paris?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
22 C and sunny
</tool_response><|im_end|>
<|im_start|>assistant
)");
  // The gRPC API's tools on a template that cannot render them: a 400.
  ServedModel plain = m;
  plain.tool_calls.template_reads_tools = false;
  EXPECT_EQ(RenderChat(p.request.chat(), plain).status().code(), absl::StatusCode::kInvalidArgument);
}

ResponseIdentity Who() { return {Endpoint::kChatCompletions, "chatcmpl-1", 7, "m", ""}; }

TEST(ToolResponses, WholeResponseShape) {
  v1::Usage usage;
  usage.set_prompt_tokens(3);
  json j = json::parse(ToolCallFullResponse(
      Who(), tool_calls::ParseAll(tool_calls::Syntax::kHermes,
                                  "\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"),
      v1::FINISH_REASON_STOP, usage));
  const json& choice = j["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "now");
  EXPECT_EQ(call["function"]["arguments"], "{}");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);

  j = json::parse(ToolCallFullResponse(Who(), tool_calls::ParseAll(tool_calls::Syntax::kHermes, "Hello"),
                                       v1::FINISH_REASON_STOP, usage));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

// Streamed: the deltas, concatenated as OpenAI's SDK concatenates them,
// give the text and the calls; marker text never shows.
TEST(ToolResponses, StreamedDeltas) {
  const tool_calls::ToolCallSupport support{tool_calls::Syntax::kHermes, true, false, "", {}};
  ToolCallResponder responder(tool_calls::Syntax::kHermes, support, nullptr);
  const std::vector<std::string> pieces = {
      "Let me look.", " <tool", "_call>\n{\"name\": \"get_weather\", \"argu",
      "ments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", "
      "\"arguments\": {}}\n</tool_call>"};
  std::string content;
  std::map<int, json> calls;
  json finish;
  for (size_t i = 0; i < pieces.size(); ++i) {
    v1::GenerateResponse message;
    message.set_text(pieces[i]);
    if (i + 1 == pieces.size()) message.set_finish_reason(v1::FINISH_REASON_STOP);
    for (const std::string& chunk : responder.StreamChunks(Who(), 0, message)) {
      const json c = json::parse(chunk);
      ASSERT_EQ(c["object"], "chat.completion.chunk");
      const json& choice = c["choices"][0];
      if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
      const json& delta = choice["delta"];
      if (delta.contains("content")) content += delta["content"].get<std::string>();
      if (!delta.contains("tool_calls")) continue;
      for (const json& d : delta["tool_calls"]) {
        json& call = calls[d["index"].get<int>()];
        if (d.contains("id")) {
          EXPECT_FALSE(call.contains("id"));
          call = d;
          continue;
        }
        call["function"]["arguments"] =
            call["function"]["arguments"].get<std::string>() + d["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(content, "Let me look. ");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  EXPECT_EQ(calls[1]["function"]["name"], "now");
  EXPECT_EQ(calls[1]["type"], "function");

  // parallel_tool_calls false: the first call only, streamed and not.
  ToolCallResponder single(tool_calls::Syntax::kHermes, support, nullptr, /*parallel=*/false);
  v1::GenerateResponse message;
  message.set_text("<tool_call>\n{\"name\": \"get_weather\", \"argu" + pieces[3]);
  message.set_finish_reason(v1::FINISH_REASON_STOP);
  int call_heads = 0;
  for (const std::string& chunk : single.StreamChunks(Who(), 0, message)) {
    const json d = json::parse(chunk)["choices"][0]["delta"];
    if (d.contains("tool_calls") && d["tool_calls"][0].contains("id")) ++call_heads;
  }
  EXPECT_EQ(call_heads, 1);
  ToolCallResponder whole(tool_calls::Syntax::kHermes, support, nullptr, /*parallel=*/false);
  whole.Collect(message);
  const json j = json::parse(whole.FullResponse(Who(), v1::FINISH_REASON_STOP, v1::Usage()));
  ASSERT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
}

}  // namespace
}  // namespace specline::openai
