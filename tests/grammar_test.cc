// The grammar engine for structured output (model/grammar): the vocabulary
// adapter, the response-format compiler and its cache, and the per-sequence
// matcher, on the default model's byte-level BPE vocabulary (SmolLM2) and
// on Llama 2's SentencePiece vocabulary. Constrained random walks check that
// what the masks let through is text the format accepts.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/grammar/grammar_compiler.h"
#include "model/grammar/grammar_matcher.h"
#include "model/grammar/grammar_random_walk.h"
#include "model/grammar/grammar_vocabulary.h"
#include "model/grammar/json_schema_drafts.h"
#include "model/grammar/response_format_grammar.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/test_util.h"

namespace specline::grammar {
namespace {

using nlohmann::json;

// A vocabulary and its compiler, loaded once per process.
struct Vocabulary {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<GrammarVocabulary> vocab;
  std::unique_ptr<GrammarCompiler> compiler;
};

// "smollm2": the default model's GGUF (its vocabulary padded by 40 ids, as a
// model's logits may be); "llama2": ../shared's SentencePiece model.
const Vocabulary* LoadVocabulary(const std::string& which) {
  static std::map<std::string, std::unique_ptr<Vocabulary>> loaded;
  auto& slot = loaded[which];
  if (!slot) {
    const std::string path = which == "smollm2"
                                 ? testing::SmolLm2Path()
                                 : testing::SharedModelPath("llama2-tokenizer/tokenizer.model");
    if (path.empty()) return nullptr;
    slot = std::make_unique<Vocabulary>();
    slot->tokenizer = LoadTokenizer(path, 0);
    const int32_t padded = slot->tokenizer->vocab_size() + (which == "smollm2" ? 40 : 0);
    slot->vocab = std::make_shared<GrammarVocabulary>(*slot->tokenizer, padded);
    slot->compiler = std::make_unique<GrammarCompiler>(slot->vocab);
  }
  return slot.get();
}

// Keys keep their order: properties are generated in the schema's order.
v1::ResponseFormat Schema(const std::string& schema) {
  v1::ResponseFormat f;
  f.set_json_schema(schema);
  return f;
}
v1::ResponseFormat Regex(const std::string& regex) {
  v1::ResponseFormat f;
  f.set_regex(regex);
  return f;
}
v1::ResponseFormat Ebnf(const std::string& ebnf) {
  v1::ResponseFormat f;
  f.set_ebnf(ebnf);
  return f;
}
v1::ResponseFormat Choice(const std::vector<std::string>& choices) {
  v1::ResponseFormat f;
  f.mutable_choice();  // set, even when empty
  for (const auto& c : choices) f.mutable_choice()->add_choices(c);
  return f;
}

std::set<int32_t> Allowed(GrammarMatcher& m) {
  std::vector<uint32_t> mask(m.mask_words());
  m.FillAllowed(mask);
  std::set<int32_t> ids;
  for (int32_t t = 0; t < m.mask_words() * 32; ++t) {
    if (mask[t / 32] >> (t % 32) & 1) ids.insert(t);
  }
  return ids;
}

// The subset of JSON Schema the nested test schema uses, checked strictly
// (no property the schema does not name).
bool Validates(const json& v, const json& s, std::string* why) {
  auto fail = [&](const std::string& m) { *why = m + " at " + v.dump(); return false; };
  if (s.contains("enum")) {
    for (const auto& e : s["enum"]) if (e == v) return true;
    return fail("not in enum");
  }
  const std::string type = s.value("type", "");
  if (type == "object") {
    if (!v.is_object()) return fail("not an object");
    for (const auto& r : s.value("required", json::array())) {
      if (!v.contains(r.get<std::string>())) return fail("missing " + r.get<std::string>());
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!s["properties"].contains(it.key())) return fail("unknown property " + it.key());
      if (!Validates(it.value(), s["properties"][it.key()], why)) return false;
    }
    return true;
  }
  if (type == "array") {
    if (!v.is_array()) return fail("not an array");
    if (v.size() < s.value("minItems", 0u) || v.size() > s.value("maxItems", 1000000u)) {
      return fail("array length");
    }
    for (const auto& item : v) if (!Validates(item, s["items"], why)) return false;
    return true;
  }
  if (type == "integer") return v.is_number_integer() || fail("not an integer");
  if (type == "number") return v.is_number() || fail("not a number");
  if (type == "boolean") return v.is_boolean() || fail("not a boolean");
  if (type == "string") {
    if (!v.is_string()) return fail("not a string");
    if (s.contains("pattern") &&
        !std::regex_search(v.get<std::string>(), std::regex(s["pattern"].get<std::string>()))) {
      return fail("pattern");
    }
    return true;
  }
  return fail("unknown type in test schema");
}

const json kNestedSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "role": {"enum": ["admin", "user", "guest"]},
    "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"},
             "minItems": 1, "maxItems": 3},
    "address": {"type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"type": "integer"},
                               "geo": {"type": "array", "items": {"type": "number"},
                                       "minItems": 2, "maxItems": 2}},
                "required": ["city", "geo"]},
    "active": {"type": "boolean"}
  },
  "required": ["name", "role", "tags", "address"]
})");

class GrammarTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    v_ = LoadVocabulary(GetParam());
    if (!v_) GTEST_SKIP() << GetParam() << " vocabulary not present (scripts/setup.sh, ../shared)";
  }
  std::shared_ptr<const CompiledGrammar> Compile(const v1::ResponseFormat& f) {
    auto c = v_->compiler->Compile(f);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }
  // `n` walks; every one must terminate, agree with Accept, and pass `check`.
  template <typename Check>
  void Walks(const v1::ResponseFormat& f, int n, Check check) {
    auto g = Compile(f);
    ASSERT_TRUE(g);
    for (int i = 0; i < n; ++i) {
      GrammarMatcher m(g);
      WalkOptions o;
      o.seed = 1000 + i;
      Walk w = RandomWalk(m, o);
      ASSERT_EQ(w.mask_accept_mismatches, 0) << w.text;
      ASSERT_TRUE(w.terminated) << "walk " << i << " hit the token limit: " << w.text;
      check(w.text);
    }
  }
  const Vocabulary* v_ = nullptr;
};

TEST_P(GrammarTest, VocabularySpellsTokensAsRawBytes) {
  const GrammarVocabulary& vocab = *v_->vocab;
  const Tokenizer& tok = *v_->tokenizer;
  EXPECT_GE(vocab.vocab_size(), tok.vocab_size());
  EXPECT_EQ(vocab.mask_words(), (vocab.vocab_size() + 31) / 32);
  EXPECT_EQ(vocab.stop_ids(), tok.stop_ids());
  // A word with a leading space is one token in both families; its bytes
  // carry the space (SentencePiece's "▁" and byte-level BPE's "Ġ" undone).
  auto ids = tok.Encode("hello hello", false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(vocab.bytes(ids.back()), " hello");
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.IsControl(id)) {
      EXPECT_EQ(vocab.bytes(id), "") << id;
    }
  }
  // Spell gives tokens whose bytes are the text exactly.
  for (const std::string text : {"{\"name\": \"", " hello world", "\n\t}]"}) {
    std::string spelled;
    for (int32_t id : vocab.Spell(text)) spelled += vocab.bytes(id);
    EXPECT_EQ(spelled, text);
  }
}

TEST_P(GrammarTest, JsonObjectWalksParseAsObjects) {
  v1::ResponseFormat f;
  f.set_json_object(true);
  Walks(f, 8, [](const std::string& text) {
    json parsed = json::parse(text, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << text;
    EXPECT_TRUE(parsed.is_object()) << text;
  });
}

TEST_P(GrammarTest, NestedSchemaWalksValidate) {
  Walks(Schema(kNestedSchema.dump()), 12, [](const std::string& text) {
    json parsed = json::parse(text, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << text;
    std::string why;
    EXPECT_TRUE(Validates(parsed, kNestedSchema, &why)) << why << "\n" << text;
  });
}

TEST_P(GrammarTest, RegexChoiceAndEbnfWalksMatch) {
  const std::string date = R"([0-9]{4}-(0[1-9]|1[0-2])-[0-9]{2})";
  Walks(Regex(date), 8, [&](const std::string& text) {
    EXPECT_TRUE(std::regex_match(text, std::regex(date))) << text;
  });
  const std::vector<std::string> choices = {"positive", "negative", "neutral", "n/a \"quoted\""};
  Walks(Choice(choices), 8, [&](const std::string& text) {
    EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
  });
  Walks(Ebnf(R"g(root ::= "(" num (("+" | "*") num)* ")"
num ::= [0-9]+)g"),
        8, [](const std::string& text) {
          EXPECT_TRUE(std::regex_match(text, std::regex(R"(\([0-9]+([+*][0-9]+)*\))"))) << text;
        });
}

TEST_P(GrammarTest, PrefixAndSuffixSurroundTheFormat) {
  v1::ResponseFormat f = Schema(R"({"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  f.set_prefix("<tool_call>\n");
  f.set_suffix("\n</tool_call>");
  Walks(f, 6, [](const std::string& text) {
    const std::string pre = "<tool_call>\n", suf = "\n</tool_call>";
    ASSERT_GE(text.size(), pre.size() + suf.size()) << text;
    ASSERT_EQ(text.substr(0, pre.size()), pre) << text;
    ASSERT_EQ(text.substr(text.size() - suf.size()), suf) << text;
    json body = json::parse(text.substr(pre.size(), text.size() - pre.size() - suf.size()),
                            nullptr, false);
    ASSERT_FALSE(body.is_discarded()) << text;
    EXPECT_TRUE(body.contains("city")) << text;
  });
}

TEST_P(GrammarTest, MasksAllowExactlyTheRightTokens) {
  const GrammarVocabulary& vocab = *v_->vocab;
  auto expect_allowed = [&](GrammarMatcher& m, auto allowed_bytes, const std::string& state) {
    std::set<int32_t> want;
    for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
      if (!vocab.bytes(id).empty() && allowed_bytes(vocab.bytes(id))) want.insert(id);
    }
    EXPECT_EQ(Allowed(m), want) << state;
  };
  // Three digits: any token of 1 to 3 digits, then only those that fit.
  GrammarMatcher digits(Compile(Regex("[0-9]{3}")));
  auto all_digits = [](const std::string& b, size_t most) {
    return b.size() <= most && std::all_of(b.begin(), b.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  expect_allowed(digits, [&](const std::string& b) { return all_digits(b, 3); }, "start");
  const int32_t seven = vocab.Spell("7").at(0);
  ASSERT_TRUE(digits.Accept(seven));
  expect_allowed(digits, [&](const std::string& b) { return all_digits(b, 2); }, "after 7");
  for (int32_t id : vocab.Spell("42")) ASSERT_TRUE(digits.Accept(id));
  EXPECT_TRUE(digits.CanEnd());
  std::set<int32_t> stops(vocab.stop_ids().begin(), vocab.stop_ids().end());
  EXPECT_EQ(Allowed(digits), stops) << "after 742 only a stop token";
  ASSERT_FALSE(stops.empty());
  ASSERT_TRUE(digits.Accept(*stops.begin()));
  EXPECT_TRUE(digits.IsTerminated());
  EXPECT_TRUE(Allowed(digits).empty());
  EXPECT_FALSE(digits.Accept(seven));

  // A choice: a token is allowed iff its bytes start one of the choices.
  const std::vector<std::string> choices = {"yes", "no", "maybe so"};
  GrammarMatcher choice(Compile(Choice(choices)));
  expect_allowed(choice, [&](const std::string& b) {
    return std::any_of(choices.begin(), choices.end(),
                       [&](const std::string& c) { return c.compare(0, b.size(), b) == 0; });
  }, "choice start");
  EXPECT_FALSE(choice.CanEnd());
}

// xgrammar 0.2.8 lets raw control characters into length-bounded strings
// and UTF-8 surrogates into any string (both found by the fuzz check);
// response_format_grammar.cc narrows them: JSON parsers reject both.
TEST_P(GrammarTest, JsonStringsRefuseControlCharactersAndSurrogates) {
  const GrammarVocabulary& vocab = *v_->vocab;
  for (const std::string schema :
       {R"({"type": "string", "maxLength": 5})", R"({"type": "string"})"}) {
    GrammarMatcher m(Compile(Schema(schema)));
    for (int32_t id : vocab.Spell("\"a")) ASSERT_TRUE(m.Accept(id)) << schema;
    for (int32_t id : Allowed(m)) {
      const std::string& b = vocab.bytes(id);
      EXPECT_TRUE(std::none_of(b.begin(), b.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20;
      })) << schema << ": token " << id << " has a control character";
    }
    // ED 9F BF is U+D7FF, the last code point before the surrogates.
    const std::vector<int32_t> ed = vocab.Spell("\xed");
    ASSERT_EQ(ed.size(), 1u);
    ASSERT_TRUE(m.Accept(ed[0])) << schema;
    const std::vector<int32_t> surrogate = vocab.Spell("\xad");
    ASSERT_EQ(surrogate.size(), 1u);
    EXPECT_FALSE(m.Accept(surrogate[0])) << schema << ": ED AD starts a surrogate";
    const std::vector<int32_t> ok = vocab.Spell("\x9f");
    ASSERT_EQ(ok.size(), 1u);
    EXPECT_TRUE(m.Accept(ok[0])) << schema;
  }
}

// Draft 4-7 tuples ("items": [...], "additionalItems") compile as the
// 2020-12 prefixItems / items they mean: each position its own schema, the
// rest additionalItems' (none when it is absent: strict, as for prefixItems).
TEST_P(GrammarTest, Draft7TupleItemsWalksValidate) {
  auto check = [](const std::string& text, bool with_rest) {
    json v = json::parse(text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << text;
    const json& t = v["t"];
    ASSERT_TRUE(t.is_array()) << text;
    if (!with_rest) {
      EXPECT_LE(t.size(), 2u) << text;
    }
    for (size_t i = 0; i < t.size(); ++i) {
      const bool typed = i == 0 ? t[i].is_string() : i == 1 ? t[i].is_number_integer() : t[i].is_boolean();
      EXPECT_TRUE(typed) << i << ": " << text;
    }
  };
  const json tuple = json::parse(R"({"type": "array", "items": [{"type": "string", "maxLength": 8},
                                    {"type": "integer"}], "minItems": 2})");
  json schema = {{"type", "object"}, {"properties", {{"t", tuple}}}, {"required", {"t"}}};
  Walks(Schema(schema.dump()), 6, [&](const std::string& text) { check(text, false); });
  schema["properties"]["t"]["additionalItems"] = {{"type", "boolean"}};
  Walks(Schema(schema.dump()), 6, [&](const std::string& text) { check(text, true); });
}

TEST(JsonSchemaDrafts, TupleItemsBecomePrefixItemsAndDataStaysAsItIs) {
  EXPECT_EQ(json::parse(TupleItemsAsPrefixItems(
                R"({"items": [{"type": "string"}], "additionalItems": false})")),
            json::parse(R"({"prefixItems": [{"type": "string"}], "items": false})"));
  const std::string data =
      R"({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}},)"
      R"( "enum": [{"items": [1]}], "default": {"items": [2]}})";
  EXPECT_EQ(json::parse(TupleItemsAsPrefixItems(data)), json::parse(data));
  EXPECT_EQ(TupleItemsAsPrefixItems("{\"items\": ["), "{\"items\": [");  // not JSON: as it was
}

// tool_choice "auto" in the generic tool form: free text that does not
// open with "{", or the schema's object; nothing else.
TEST_P(GrammarTest, TextOrJsonSchemaTakesTextOrTheObject) {
  absl::StatusOr<std::string> ebnf = TextOrJsonSchemaEbnf(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})");
  ASSERT_TRUE(ebnf.ok()) << ebnf.status();
  auto grammar = Compile(Ebnf(*ebnf));
  ASSERT_TRUE(grammar);
  auto takes = [&](const std::string& text) {
    GrammarMatcher m(grammar);
    for (int32_t id : v_->vocab->Spell(text)) {
      if (!m.Accept(id)) return false;
    }
    return m.CanEnd();
  };
  for (const char* ok : {"", "Hello {there}.\nBye", "  It is 22 C", "{\"a\": 12}", "{\"a\":1}"})
    EXPECT_TRUE(takes(ok)) << ok;
  for (const char* bad : {"{\"b\": 1}", "{\"a\": 1} and more", " {\"a\": 1}", "{\"a\": \"x\"}"})
    EXPECT_FALSE(takes(bad)) << bad;
  EXPECT_FALSE(TextOrJsonSchemaEbnf(R"({"type": "no-such-type"})").ok());
}

TEST_P(GrammarTest, ControlAndPaddingTokensAreNeverAllowed) {
  const Tokenizer& tok = *v_->tokenizer;
  const GrammarVocabulary& vocab = *v_->vocab;
  std::vector<int32_t> never;
  for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
    const bool stop = std::count(vocab.stop_ids().begin(), vocab.stop_ids().end(), id) > 0;
    if (!stop && (id >= tok.vocab_size() || tok.IsControl(id))) never.push_back(id);
  }
  ASSERT_FALSE(never.empty());
  v1::ResponseFormat any_string = Regex("[\\s\\S]{0,20}");  // any text at all
  for (const auto& f : {any_string, Schema(kNestedSchema.dump())}) {
    auto g = Compile(f);
    ASSERT_TRUE(g);
    GrammarMatcher m(g);
    WalkOptions o;
    o.closing_bias = 0.2;
    Walk w = RandomWalk(m, o);
    m.Reset();
    std::vector<uint32_t> mask(m.mask_words());
    for (size_t i = 0; i <= w.tokens.size(); ++i) {
      m.FillAllowed(mask);
      for (int32_t id : never) {
        ASSERT_FALSE(mask[id / 32] >> (id % 32) & 1) << "token " << id << " at step " << i;
      }
      if (i < w.tokens.size()) {
        ASSERT_TRUE(m.Accept(w.tokens[i]));
      }
    }
    for (int32_t id : never) EXPECT_FALSE(m.Accept(id)) << id;
  }
}

TEST_P(GrammarTest, RollbackRestoresMasks) {
  GrammarMatcher m(Compile(Schema(kNestedSchema.dump())));
  WalkOptions o;
  o.seed = 7;
  Walk w = RandomWalk(m, o);
  ASSERT_TRUE(w.terminated);
  ASSERT_GT(w.tokens.size(), 10u);
  m.Reset();
  std::vector<std::vector<uint32_t>> masks;
  for (int32_t id : w.tokens) {
    masks.emplace_back(m.mask_words());
    m.FillAllowed(masks.back());
    ASSERT_TRUE(m.Accept(id));
  }
  // Drafts accepted tentatively and rolled back in blocks of 4, as
  // speculation does, then all the way back.
  std::vector<uint32_t> mask(m.mask_words());
  for (size_t k = w.tokens.size(); k >= 4; k -= 4) {
    m.Rollback(4);
    EXPECT_EQ(m.accepted(), static_cast<int>(k - 4));
    m.FillAllowed(mask);
    ASSERT_EQ(mask, masks[k - 4]) << "after rolling back to " << k - 4;
  }
  m.Rollback(m.accepted());
  m.FillAllowed(mask);
  EXPECT_EQ(mask, masks[0]);
  EXPECT_THROW(m.Rollback(1), std::out_of_range);
  // A stop token rolled back un-terminates.
  GrammarMatcher c(Compile(Choice({"ok"})));
  for (int32_t id : v_->vocab->Spell("ok")) ASSERT_TRUE(c.Accept(id));
  ASSERT_TRUE(c.Accept(v_->vocab->stop_ids().at(0)));
  EXPECT_TRUE(c.IsTerminated());
  c.Rollback(1);
  EXPECT_FALSE(c.IsTerminated());
  EXPECT_TRUE(c.CanEnd());
}

TEST_P(GrammarTest, DraftMasksCutTheDraftAtTheFirstForbiddenToken) {
  GrammarMatcher m(Compile(Schema(kNestedSchema.dump())));
  WalkOptions o;
  o.seed = 11;
  Walk w = RandomWalk(m, o);
  ASSERT_GT(w.tokens.size(), 8u);
  m.Reset();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(m.Accept(w.tokens[i]));
  // A draft of 4 tokens the grammar allows, then one it does not (a control
  // token, or a second "{" where a value was started), then one more.
  std::vector<int32_t> draft(w.tokens.begin() + 3, w.tokens.begin() + 7);
  const int32_t forbidden = v_->vocab->Spell("\x01").at(0);
  draft.push_back(forbidden);
  draft.push_back(w.tokens[7]);
  const int words = m.mask_words();
  std::vector<uint32_t> masks((draft.size() + 1) * words);
  std::vector<uint32_t> before(words);
  m.FillAllowed(before);
  EXPECT_EQ(m.DraftMasks(draft, masks), 4);
  EXPECT_EQ(m.accepted(), 3) << "the state is left as it was";
  std::vector<uint32_t> mask(words);
  m.FillAllowed(mask);
  EXPECT_EQ(mask, before);
  for (int i = 0; i <= 4; ++i) {
    m.FillAllowed(mask);
    EXPECT_TRUE(std::equal(mask.begin(), mask.end(), masks.begin() + i * words)) << "mask " << i;
    if (i < 4) {
      ASSERT_TRUE(m.Accept(draft[i]));
    }
  }
  EXPECT_FALSE(m.Accept(forbidden));
}

TEST_P(GrammarTest, ForcedTokensSpellWhatTheGrammarForces) {
  CompilerOptions compact;
  compact.json.any_whitespace = false;
  GrammarCompiler compiler(v_->vocab, compact);
  auto g = compiler.Compile(Schema(R"({"type": "object",
      "properties": {"name": {"type": "string"}, "kind": {"enum": ["alpha"]}},
      "required": ["name", "kind"]})"));
  ASSERT_TRUE(g.ok()) << g.status();
  GrammarMatcher m(*g);
  std::vector<uint32_t> before(m.mask_words()), after(m.mask_words());
  m.FillAllowed(before);
  std::vector<int32_t> forced = m.ForcedTokens(64);
  std::string text;
  for (int32_t id : forced) text += v_->vocab->bytes(id);
  EXPECT_EQ(text, "{\"name\": \"");
  m.FillAllowed(after);
  EXPECT_EQ(before, after) << "ForcedTokens must leave the state as it was";
  EXPECT_EQ(m.accepted(), 0);
  ASSERT_EQ(m.ForcedTokens(1).size(), 1u);
  for (int32_t id : forced) ASSERT_TRUE(m.Accept(id));
  EXPECT_TRUE(m.ForcedTokens(8).empty()) << "the name's text is free";
  for (int32_t id : v_->vocab->Spell("Bo\"")) ASSERT_TRUE(m.Accept(id));
  text.clear();
  for (int32_t id : m.ForcedTokens(64)) text += v_->vocab->bytes(id);
  EXPECT_EQ(text, ", \"kind\": \"alpha\"}");
}

TEST_P(GrammarTest, BadFormatsAreInvalidArgument) {
  auto expect_invalid = [&](const v1::ResponseFormat& f, const std::string& what) {
    auto c = v_->compiler->Compile(f);
    ASSERT_FALSE(c.ok()) << what;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(c.status().message().find(what), absl::string_view::npos) << c.status();
  };
  v1::ResponseFormat not_json;
  not_json.set_json_schema("{\"type\": \"object\",");
  expect_invalid(not_json, "json_schema");
  expect_invalid(Schema(R"({"type": "no-such-type"})"), "json_schema");
  expect_invalid(Regex("[0-9"), "regex: Regex parsing error at position 5: Unclosed '['");
  expect_invalid(Ebnf("root ::= \"a\" | "), "ebnf");
  expect_invalid(Ebnf("start ::= \"a\""), "ebnf");  // no root rule
  expect_invalid(Choice({}), "choice");
  expect_invalid(v1::ResponseFormat(), "no grammar");
}

TEST_P(GrammarTest, CompilerCachesByTheWholeFormat) {
  CompilerOptions small;
  small.cache_entries = 2;
  GrammarCompiler compiler(v_->vocab, small);
  auto a = compiler.Compile(Regex("a+"));
  ASSERT_TRUE(a.ok());
  auto a_again = compiler.Compile(Regex("a+"));
  ASSERT_TRUE(a_again.ok());
  EXPECT_EQ(a->get(), a_again->get()) << "the same format comes from the cache";
  v1::ResponseFormat a_prefixed = Regex("a+");
  a_prefixed.set_prefix("x");
  auto b = compiler.Compile(a_prefixed);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(a->get(), b->get()) << "a prefix makes another format";
  EXPECT_EQ(compiler.cached_entries(), 2u);
  ASSERT_TRUE(compiler.Compile(Regex("b+")).ok());
  EXPECT_EQ(compiler.cached_entries(), 2u) << "bounded";
  EXPECT_GT(compiler.cached_bytes(), 0);
  auto a_recompiled = compiler.Compile(Regex("a+"));  // evicted (least recently used)
  ASSERT_TRUE(a_recompiled.ok());
  EXPECT_NE(a->get(), a_recompiled->get());
  // Shared by request threads: concurrent compiles of new and cached formats.
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 3; ++i) {
        if (compiler.Compile(Regex("[a-c]{" + std::to_string(1 + (t + i) % 3) + "}")).ok()) ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 12);
  EXPECT_LE(compiler.cached_entries(), 2u);
}

TEST(MaskLogits, ForbiddenTokensGetMinusInfinity) {
  std::vector<uint32_t> mask = {0xffffffffu, 0x00000005u};  // 0-31, 32 and 34 allowed
  std::vector<float> logits(40, 1.0f);
  MaskLogits(mask, logits);
  for (int t = 0; t < 40; ++t) {
    const bool allowed = t < 32 || t == 32 || t == 34;
    EXPECT_EQ(std::isinf(logits[t]) && logits[t] < 0, !allowed) << t;
  }
  std::vector<float> shorter(33, 2.0f);  // logits narrower than the mask
  MaskLogits(mask, shorter);
  EXPECT_EQ(shorter[32], 2.0f);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, GrammarTest, ::testing::Values("smollm2", "llama2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace specline::grammar
