// Tokenizers against goldens written by scripts/reference/tokenizer_golden.py
// (Python sentencepiece / HF tokenizers / regex / jinja2): encodings, decodes,
// streaming detokenization, pre-tokenizer splits and chat templates, plus the
// error paths of every loader.
#include <algorithm>
#include <chrono>
#include <functional>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/formats/gguf.h"
#include "model/formats/model_source.h"
#include "model/tokenizer/byte_level_bpe.h"
#include "model/tokenizer/chat_template.h"
#include "model/tokenizer/model_tokenizer.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/unicode.h"
#include "tests/test_util.h"

namespace specline {
namespace {

using json = nlohmann::json;
using testing::ReadFile;
using testing::SharedModelPath;
using testing::SmolLm2Path;
using testing::SourcePath;

json Golden(const std::string& name) {
  return json::parse(ReadFile(SourcePath("tests/data/tokenizer/" + name)));
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// Streams `ids` through an IncrementalDetokenizer: every chunk must be valid
// UTF-8 and the chunks together must equal the whole decode.
void ExpectStreamingMatches(const Tokenizer& tok, const std::vector<int32_t>& ids,
                            const std::string& context) {
  IncrementalDetokenizer detok(tok);
  std::string streamed;
  for (int32_t id : ids) {
    std::string chunk = detok.Push(id);
    EXPECT_TRUE(unicode::IsValidUtf8(chunk)) << context << ": invalid chunk after id " << id;
    streamed += chunk;
  }
  std::string tail = detok.Flush();
  EXPECT_TRUE(unicode::IsValidUtf8(tail)) << context;
  streamed += tail;
  EXPECT_EQ(streamed, tok.Decode(ids)) << context;
}

// Checks every golden case. `only_round_trips`: compare only texts whose
// reference decode gives the text back (a loader whose normalizer differs
// from the reference's, e.g. no whitespace cleanup, must agree on those).
void ExpectMatchesGolden(const Tokenizer& tok, const json& golden, bool only_round_trips = false) {
  int compared = 0;
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"];
    const std::string decoded = c["decoded"];
    if (only_round_trips && decoded != text) continue;
    auto want = c["ids"].get<std::vector<int32_t>>();
    auto got = tok.Encode(text, /*add_bos=*/false);
    EXPECT_EQ(got, want) << golden["tokenizer"] << " text: \"" << text << "\"";
    EXPECT_EQ(tok.Decode(want), decoded) << golden["tokenizer"] << " text: \"" << text << "\"";
    ExpectStreamingMatches(tok, want, "text \"" + text + "\"");
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

#define REQUIRE_SHARED(var, rel)                                             \
  const std::string var = SharedModelPath(rel);                              \
  if (var.empty()) GTEST_SKIP() << "../shared/models/" rel " not present"

#define REQUIRE_SMOLLM2(var)                                                   \
  const std::string var = SmolLm2Path();                                       \
  if (var.empty()) GTEST_SKIP() << "SmolLM2 GGUF not in the model cache (scripts/setup.sh fetches it)"

// ---------------------------------------------------------------- SentencePiece

TEST(SentencePiece, Tok512ModelMatchesGolden) {
  REQUIRE_SHARED(path, "stories260K/tok512.model");
  auto tok = LoadSentencePieceModel(path);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_TRUE(tok->IsControl(1));
  EXPECT_FALSE(tok->IsControl(300));
  ExpectMatchesGolden(*tok, Golden("stories260k.json"));
}

TEST(SentencePiece, Tok512BinAgreesWithModel) {
  REQUIRE_SHARED(bin, "stories260K/tok512.bin");
  REQUIRE_SHARED(model, "stories260K/tok512.model");
  auto from_bin = LoadLlama2cTokenizer(bin, 512);
  auto from_model = LoadSentencePieceModel(model);
  for (int32_t id = 0; id < 512; ++id) {
    EXPECT_EQ(from_bin->Piece(id), from_model->Piece(id)) << id;
    EXPECT_EQ(from_bin->TokenBytes(5, id), from_model->TokenBytes(5, id)) << id;
  }
  // tok512.model cleans up whitespace (remove_extra_whitespaces defaults to
  // true) where llama2.c's encoder does not, so compare where that is moot.
  ExpectMatchesGolden(*from_bin, Golden("stories260k.json"), /*only_round_trips=*/true);
}

TEST(SentencePiece, Tok512GgufAgreesWithModel) {
  REQUIRE_SHARED(path, "stories260K/stories260K.gguf");
  auto tok = LoadGgufTokenizer(*GgufFile::Open(path));
  EXPECT_EQ(tok->vocab_size(), 512);
  ExpectMatchesGolden(*tok, Golden("stories260k.json"), /*only_round_trips=*/true);
}

// The first piece after BOS drops its dummy-prefix space, as llama2.c's
// run.c prints it: the reference output starts "Once upon a time".
TEST(SentencePiece, LeadingSpaceRuleMatchesRunC) {
  REQUIRE_SHARED(bin, "stories260K/tok512.bin");
  REQUIRE_SHARED(ref_path, "stories260K/reference-greedy-from-bos-256.txt");
  auto tok = LoadLlama2cTokenizer(bin, 512);
  std::string ref = ReadFile(ref_path);
  while (!ref.empty() && ref.back() == '\n') ref.pop_back();  // run.c ends with a newline
  auto ids = tok->Encode(ref, /*add_bos=*/true);
  ASSERT_EQ(ids[0], 1);
  EXPECT_EQ(tok->TokenBytes(1, ids[1]).substr(0, 4), "Once");
  IncrementalDetokenizer detok(*tok);
  std::string out;
  for (int32_t id : ids) out += detok.Push(id);
  out += detok.Flush();
  EXPECT_EQ(out, ref);
  // Mid-text, the same piece keeps its space.
  EXPECT_EQ(tok->TokenBytes(ids[1], ids[1]).substr(0, 5), " Once");
}

TEST(SentencePiece, Llama2AllSourcesMatchGolden) {
  REQUIRE_SHARED(model, "llama2-tokenizer/tokenizer.model");
  REQUIRE_SHARED(bin, "llama2-tokenizer/tokenizer.bin");
  REQUIRE_SHARED(gguf, "llama2-tokenizer/ggml-vocab-llama-spm.gguf");
  json golden = Golden("llama2.json");
  auto from_model = LoadSentencePieceModel(model);
  EXPECT_EQ(from_model->vocab_size(), 32000);
  ExpectMatchesGolden(*from_model, golden);
  // Llama 2 keeps whitespace as is, so every source must match every case.
  ExpectMatchesGolden(*LoadLlama2cTokenizer(bin, 32000), golden);
  auto from_gguf = LoadGgufTokenizer(*GgufFile::Open(gguf));
  ExpectMatchesGolden(*from_gguf, golden);
  EXPECT_TRUE(from_gguf->add_bos_by_default());
  EXPECT_EQ(LoadTokenizer(model, 0)->Encode("Hello world", true),
            (std::vector<int32_t>{1, 15043, 3186}));
}

TEST(SentencePiece, ParseSpecialMatchesControlTokens) {
  REQUIRE_SHARED(model, "llama2-tokenizer/tokenizer.model");
  auto tok = LoadSentencePieceModel(model);
  std::vector<int32_t> want = {1};
  auto rest = tok->Encode("[INST] hi [/INST]", false);
  want.insert(want.end(), rest.begin(), rest.end());
  want.push_back(2);
  EXPECT_EQ(tok->Encode("<s>[INST] hi [/INST]</s>", false, /*parse_special=*/true), want);
  // Without parse_special "<s>" is just text.
  auto plain = tok->Encode("<s>", false, false);
  EXPECT_NE(plain, std::vector<int32_t>{1});
  EXPECT_EQ(tok->Decode(plain), "<s>");
  EXPECT_EQ(tok->stop_ids(), std::vector<int32_t>{2});
}

// Committed unigram model: Viterbi, a precompiled charsmap from a custom
// rule set, whitespace cleanup, a user-defined symbol, <unk> without byte
// fallback.
TEST(SentencePiece, UnigramMatchesGolden) {
  auto tok = LoadSentencePieceModel(SourcePath("tests/data/tokenizer/unigram_small.model"));
  ExpectMatchesGolden(*tok, Golden("unigram_small.json"));
  auto sep = tok->Encode("a<sep>b", false);
  EXPECT_NE(std::find(sep.begin(), sep.end(), 3), sep.end()) << "user-defined <sep> is id 3";
}

// ---------------------------------------------------------------- byte-level BPE

TEST(ByteLevelBpe, SmolLm2GgufMatchesGolden) {
  REQUIRE_SMOLLM2(path);
  auto tok = LoadGgufTokenizer(*GgufFile::Open(path));
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_FALSE(tok->add_bos_by_default());
  json golden = Golden("smollm2.json");
  ExpectMatchesGolden(*tok, golden);
  for (const auto& c : golden["special_cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok->Encode(text, false, true), c["ids_parse_special"].get<std::vector<int32_t>>())
        << text;
    EXPECT_EQ(tok->Encode(text, false, false), c["ids_plain"].get<std::vector<int32_t>>()) << text;
  }
  const auto& stops = tok->stop_ids();
  EXPECT_NE(std::find(stops.begin(), stops.end(), 2), stops.end()) << "<|im_end|>";
  EXPECT_TRUE(tok->IsControl(1));
  EXPECT_EQ(tok->TokenBytes(-1, 1), "");
}

// tokenizer.json: written from the GGUF's vocabulary in the layout HF uses
// for SmolLM2, then loaded through LoadTokenizerJson.
TEST(ByteLevelBpe, TokenizerJsonMatchesGolden) {
  REQUIRE_SMOLLM2(path);
  auto gguf = GgufFile::Open(path);
  json vocab = json::object(), merges = json::array(), added = json::array();
  const auto& tokens = *gguf->Find("tokenizer.ggml.tokens")->AsArray();
  const auto& types = *gguf->Find("tokenizer.ggml.token_type")->AsArray();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[*tokens[i].AsString()] = i;
    if (*types[i].AsInt() == 3)
      added.push_back({{"id", i}, {"content", *tokens[i].AsString()}, {"special", true}});
  }
  for (const auto& m : *gguf->Find("tokenizer.ggml.merges")->AsArray()) merges.push_back(*m.AsString());
  json root = {
      {"added_tokens", added},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Digits"}, {"individual_digits", true}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  std::string file = testing::TempDir() + "/tokenizer.json";
  WriteFile(file, root.dump());
  auto tok = LoadTokenizer(file, 0);
  ExpectMatchesGolden(*tok, Golden("smollm2.json"));
}

TEST(ByteLevelBpe, ByteToUnicodeIsGpt2Table) {
  for (int b = 0; b < 256; ++b) EXPECT_EQ(UnicodeToByte(ByteToUnicode(b)), b);
  EXPECT_EQ(ByteToUnicode(' '), U'\u0120');  // "Ġ"
  EXPECT_EQ(ByteToUnicode('\n'), U'\u010A');  // "Ċ"
  EXPECT_EQ(ByteToUnicode('A'), U'A');
}

TEST(PreTokenizer, MatchesPythonRegex) {
  json golden = Golden("pretokenize.json");
  const std::pair<const char*, PreTokenizerKind> kinds[] = {
      {"gpt2", PreTokenizerKind::kGpt2},
      {"llama3", PreTokenizerKind::kLlama3},
      {"qwen2", PreTokenizerKind::kQwen2},
      {"smollm", PreTokenizerKind::kSmolLm}};
  for (const auto& [name, kind] : kinds) {
    for (const auto& c : golden[name]) {
      const std::string text = c["text"];
      std::vector<std::string> got;
      for (auto chunk : PreTokenize(text, kind)) got.emplace_back(chunk);
      EXPECT_EQ(got, c["chunks"].get<std::vector<std::string>>()) << name << ": \"" << text << "\"";
    }
  }
  EXPECT_EQ(PreTokenizerFromName("llama-bpe"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(PreTokenizerFromName("smollm"), PreTokenizerKind::kSmolLm);
  EXPECT_THROW(PreTokenizerFromName("no-such-pre"), std::invalid_argument);
}

// ---------------------------------------------------------------- detokenizer

TEST(IncrementalDetokenizer, HoldsBackSplitCharacters) {
  REQUIRE_SHARED(path, "stories260K/tok512.model");
  auto tok = LoadSentencePieceModel(path);
  // "日" is not in the 512-piece vocabulary: three byte tokens.
  auto ids = tok->Encode("a日", false);
  ASSERT_GE(ids.size(), 4u);
  IncrementalDetokenizer detok(*tok);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(detok.Push(id));
  EXPECT_EQ(chunks[chunks.size() - 3], "");
  EXPECT_EQ(chunks[chunks.size() - 2], "");
  EXPECT_EQ(chunks.back(), "日");
  // A character that never completes is flushed as U+FFFD.
  IncrementalDetokenizer cut(*tok);
  std::string out = cut.Push(ids[ids.size() - 3]);
  out += cut.Flush();
  EXPECT_EQ(out, "\xef\xbf\xbd");
}

// ---------------------------------------------------------------- chat templates

std::vector<ChatMessage> Messages(const json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) out.push_back({m["role"], m["content"]});
  return out;
}

// The hand-written renderers' goldens (jinja2 through transformers), now
// rendered by the Jinja engine from each family's template source.
TEST(ChatTemplate, MatchesJinjaRenders) {
  const json golden = Golden("chat_templates.json");
  int rendered = 0;
  for (const auto& entry : golden) {
    const std::string name = entry["name"];
    const std::string where = entry["template"];
    std::string source;
    if (where.rfind("gguf:", 0) == 0) {
      const std::string path = SmolLm2Path();
      ASSERT_FALSE(path.empty()) << "SmolLM2 is not in the model cache; run scripts/setup.sh";
      source = *GgufFile::Open(path)->Find("tokenizer.chat_template")->AsString();
    } else {
      source = ReadFile(SourcePath("tests/data/tokenizer/" + where));
    }
    auto t = ChatTemplate::Parse(source, name, entry["bos_token"], entry["eos_token"]);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    ASSERT_GT(entry["renders"].size(), 0u) << name;
    for (const auto& r : entry["renders"]) {
      ChatRenderOptions options;
      options.add_generation_prompt = r["add_generation_prompt"];
      auto text = t->Apply(Messages(r["messages"]), options);
      ASSERT_TRUE(text.ok()) << name << ": " << text.status();
      EXPECT_EQ(*text, r["text"].get<std::string>()) << name << " messages " << r["messages"].dump();
      ++rendered;
    }
  }
  EXPECT_GT(rendered, 20);
}

TEST(ChatTemplate, SmolLm2DefaultSystemPromptAndControlTokens) {
  REQUIRE_SMOLLM2(path);
  auto model = OpenModel(path);
  auto tok = OpenTokenizerFor(*model);
  auto t = ChatTemplateFor(*model, tok.get());
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->has_value());
  auto text = (*t)->Apply(std::vector<ChatMessage>{{"user", "Hi"}});
  ASSERT_TRUE(text.ok()) << text.status();
  // The template's own default system prompt, written when there is none.
  EXPECT_NE(text->find("You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
            std::string::npos);
  // The rendered prompt tokenizes into the ChatML control tokens.
  auto ids = tok->Encode(*text, false, true);
  EXPECT_EQ(ids.front(), 1);  // <|im_start|>
}

TEST(ChatTemplate, ErrorsNameTheTemplateAndItsProblem) {
  auto bad = ChatTemplate::Parse("{% if messages %}no end", "my.jinja", "", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("my.jinja"), std::string::npos) << bad.status();

  // The template's own refusal comes back with its message.
  auto strict = ChatTemplate::Parse(
      "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
      "{{ m.content }}{% endfor %}",
      "strict", "", "");
  ASSERT_TRUE(strict.ok()) << strict.status();
  auto refused = strict->Apply(std::vector<ChatMessage>{{"system", "be brief"}, {"user", "hi"}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("Only user and assistant roles are supported!"),
            std::string::npos)
      << refused.status();
  auto fine = strict->Apply(std::vector<ChatMessage>{{"user", "hi"}});
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(*fine, "hi");

  // Variables the server sets cannot be renamed by chat_template_kwargs.
  ChatRenderOptions options;
  options.extra = {{"add_generation_prompt", false}};
  EXPECT_FALSE(strict->Apply(std::vector<ChatMessage>{{"user", "hi"}}, options).ok());
  options.extra = {{"enable_thinking", false}};
  EXPECT_TRUE(strict->Apply(std::vector<ChatMessage>{{"user", "hi"}}, options).ok());
}

TEST(ChatTemplate, TemplateFilesAndNamedVariants) {
  const std::string dir = ::testing::TempDir();
  const std::string jinja_path = dir + "/t.jinja";
  const std::string json_path = dir + "/tokenizer_config.json";
  {
    std::ofstream(jinja_path) << "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}"
                                 "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";
    nlohmann::json cfg = {{"chat_template", nlohmann::json::array(
                                                {{{"name", "default"}, {"template", "plain:{{ messages[0].content }}"}},
                                                 {{"name", "tool_use"}, {"template", "tools:{{ tools | length }}"}}})}};
    std::ofstream(json_path) << cfg.dump();
  }
  auto t = ChatTemplate::FromFile(jinja_path, "<s>", "</s>");
  ASSERT_TRUE(t.ok()) << t.status();
  ChatRenderOptions no_gen;
  no_gen.add_generation_prompt = false;
  EXPECT_EQ(*t->Apply(std::vector<ChatMessage>{{"user", "hi"}}), "<s>[user]hi[assistant]");
  EXPECT_EQ(*t->Apply(std::vector<ChatMessage>{{"user", "hi"}}, no_gen), "<s>[user]hi");

  auto named = ChatTemplate::FromFile(json_path, "", "");
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(*named->Apply(std::vector<ChatMessage>{{"user", "hi"}}), "plain:hi");
  ChatRenderOptions with_tools;
  with_tools.tools = nlohmann::ordered_json::array({{{"type", "function"}}, {{"type", "function"}}});
  EXPECT_EQ(*named->Apply(std::vector<ChatMessage>{{"user", "hi"}}, with_tools), "tools:2");

  EXPECT_EQ(ChatTemplate::FromFile(dir + "/missing.jinja", "", "").status().code(),
            absl::StatusCode::kNotFound);
}

// ---------------------------------------------------------------- bad input

void ExpectThrowsNaming(const std::function<void()>& f, const std::string& path) {
  try {
    f();
    ADD_FAILURE() << "no exception for " << path;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, BadFilesThrowWithTheirName) {
  const std::string dir = testing::TempDir();
  std::string model = ReadFile(SourcePath("tests/data/tokenizer/unigram_small.model"));
  const std::string truncated_model = dir + "/truncated.model";
  WriteFile(truncated_model, model.substr(0, model.size() / 2));
  ExpectThrowsNaming([&] { LoadSentencePieceModel(truncated_model); }, truncated_model);

  const std::string garbage = dir + "/garbage.model";
  WriteFile(garbage, std::string("\xff\xff\xff\xff not a protobuf", 20));
  ExpectThrowsNaming([&] { LoadSentencePieceModel(garbage); }, garbage);

  // tokenizer.bin: header, then one token cut short.
  const std::string bin = dir + "/truncated.bin";
  std::string bytes(4, '\0');
  bytes[0] = 8;
  float score = 0;
  int32_t len = 5;
  bytes.append(reinterpret_cast<char*>(&score), 4).append(reinterpret_cast<char*>(&len), 4).append("ab");
  WriteFile(bin, bytes);
  ExpectThrowsNaming([&] { LoadLlama2cTokenizer(bin, 3); }, bin);

  const std::string bad_json = dir + "/tokenizer.json";
  WriteFile(bad_json, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,");
  ExpectThrowsNaming([&] { LoadTokenizerJson(bad_json); }, bad_json);

  const std::string missing = dir + "/does-not-exist.model";
  ExpectThrowsNaming([&] { LoadTokenizer(missing, 0); }, missing);
}

// ---------------------------------------------------------------- speed

}  // namespace
}  // namespace specline
