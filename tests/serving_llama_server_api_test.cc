// llama-server's own endpoints on a real deployment's API port (`specline
// serve` on loopback, SmolLM2): /tokenize equal to llama-server's on the
// same GGUF (tests/data/llama_server/tokenize_golden.json, made by
// bench/llama_server_tokenize_golden.py), /detokenize, the native
// /completion (greedy text equal to /v1/completions', streamed and not,
// timings, n_probs, stop words, GBNF and JSON-schema grammars), /props,
// /slots, the errors in llama-server's shape; and /infill on a copy of the
// model whose GGUF names fill-in-the-middle tokens (no test model has
// FIM tokens of its own: SmolLM2's vocabulary has none).
#include <atomic>
#include <thread>

#include "model/formats/gguf.h"
#include "model/formats/gguf_writer.h"
#include "model/tokenizer/tokenizer.h"
#include "services/llama_server/fim_tokens.h"
#include "services/llama_server/infill_prompt.h"
#include "tests/http_test_client.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

using nlohmann::json;

// `base` with `more`'s fields set.
json With(json base, const json& more) {
  base.update(more);
  return base;
}

class LlamaServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (SmolLm2Path().empty()) return;
    stack_ = StartStack(SmolLm2Path(), 1).release();
    ASSERT_TRUE(WaitForHttpHealth(Http()));
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  void SetUp() override {
    ASSERT_FALSE(SmolLm2Path().empty()) << "SmolLM2 is fetched by scripts/setup.sh";
  }
  static int Http() { return stack_->ports["gateway"]["http"].get<int>(); }
  static HttpResult Post(const std::string& path, const json& body) { return PostJson(Http(), path, body); }
  static std::vector<int32_t> Tokenize(const std::string& text) {
    HttpResult r = Post("/tokenize", {{"content", text}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.Json()["tokens"].get<std::vector<int32_t>>();
  }
  static ServingStack* stack_;
};
ServingStack* LlamaServerApi::stack_ = nullptr;

// A 400 (or `status`) in llama-server's error shape whose message names `field`.
void ExpectError(const HttpResult& r, const std::string& field, int status = 400) {
  EXPECT_EQ(r.status, status) << r.body;
  const json body = r.Json();
  ASSERT_TRUE(body.contains("error")) << r.body;
  EXPECT_EQ(body["error"]["code"], status) << r.body;
  EXPECT_TRUE(body["error"]["type"].is_string()) << r.body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find(field), std::string::npos) << r.body;
}

TEST_F(LlamaServerApi, TokenizeEqualsLlamaServersOnTheSameFile) {
  const json& golden = GoldenJson("tests/data/llama_server/tokenize_golden.json");
  ASSERT_EQ(golden["model"], "SmolLM2-135M-Instruct.Q4_1.gguf");
  ASSERT_GE(golden["cases"].size(), 12u);
  for (const json& c : golden["cases"]) {
    json request = c["request"];
    request["with_pieces"] = true;
    HttpResult r = Post("/tokenize", request);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Json()["tokens"], c["tokens"]) << request.dump();
    // Without pieces: the ids alone.
    std::vector<int32_t> ids;
    for (const json& t : c["tokens"]) ids.push_back(t["id"]);
    request.erase("with_pieces");
    r = Post("/tokenize", request);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Json()["tokens"].get<std::vector<int32_t>>(), ids) << request.dump();
    // /detokenize gives llama-server's text back (special tokens written).
    r = Post("/detokenize", {{"tokens", ids}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Json()["content"], c["detokenized"]) << request.dump();
  }
}

TEST_F(LlamaServerApi, DetokenizeRoundTripsAndTokenizeTakesMixedContent) {
  for (const std::string text : {"Hello world", "naïve 日本語 🦙\n\tx", "<|im_start|>user\nHi<|im_end|>"}) {
    HttpResult r = Post("/detokenize", {{"tokens", Tokenize(text)}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.Json()["content"], text);
  }
  // A mix of token ids and strings is tokenized piece by piece.
  const std::vector<int32_t> hello = Tokenize("Hello"), world = Tokenize(" world");
  HttpResult r = Post("/tokenize", {{"content", json::array({hello[0], " world"})}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<int32_t> want = {hello[0]};
  want.insert(want.end(), world.begin(), world.end());
  EXPECT_EQ(r.Json()["tokens"].get<std::vector<int32_t>>(), want);
  // Any Content-Type, as llama-server reads bodies (`curl -d` sends a form's).
  r = HttpCall(Http(), "POST", "/tokenize", R"({"content": "Hello"})",
               {{"Content-Type", "application/x-www-form-urlencoded"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["tokens"].get<std::vector<int32_t>>(), hello);
  // No content: no tokens (llama-server's answer).
  r = Post("/tokenize", json::object());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["tokens"], json::array());
}

constexpr char kPrompt[] = "The capital of France is";

// The timings object llama-server sends, with numbers in their ranges.
void ExpectTimings(const json& reply) {
  const json& t = reply["timings"];
  for (const char* key : {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                          "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}) {
    ASSERT_TRUE(t.contains(key) && t[key].is_number()) << key << " in " << t;
    EXPECT_GE(t[key].get<double>(), 0) << key;
  }
  EXPECT_EQ(t["predicted_n"], reply["tokens_predicted"]);
  EXPECT_EQ(t["prompt_n"].get<int>() + t["cache_n"].get<int>(), reply["tokens_evaluated"].get<int>());
}

TEST_F(LlamaServerApi, CompletionEqualsOpenAiCompletionsStreamedAndNot) {
  HttpResult oa = Post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(oa.status, 200) << oa.body;
  const std::string want = oa.Json()["choices"][0]["text"];
  const int want_tokens = oa.Json()["usage"]["completion_tokens"];
  const size_t prompt_tokens = Tokenize(kPrompt).size();

  HttpResult r = Post("/completion", {{"prompt", kPrompt}, {"n_predict", 12}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json whole = r.Json();
  EXPECT_EQ(whole["content"], want);
  EXPECT_EQ(whole["stop"], true);
  EXPECT_EQ(whole["tokens_predicted"], want_tokens);
  EXPECT_EQ(whole["tokens_evaluated"], prompt_tokens);
  EXPECT_EQ(whole["stop_type"], want_tokens == 12 ? "limit" : "eos");
  EXPECT_EQ(whole["model"], "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_EQ(whole["prompt"], kPrompt);
  EXPECT_EQ(whole["generation_settings"]["n_predict"], 12);
  EXPECT_EQ(whole["generation_settings"]["temperature"], 0.0);
  EXPECT_FALSE(whole.contains("completion_probabilities"));
  ExpectTimings(whole);

  // Streamed: content chunks with stop false, then one with stop true and
  // the timings; no [DONE].
  r = Post("/completions", {{"prompt", kPrompt}, {"n_predict", 12}, {"temperature", 0}, {"stream", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/event-stream");
  SseEvents events = ParseSse(r.body);
  ASSERT_TRUE(events.error.empty()) << events.error;
  ASSERT_GE(events.data.size(), 2u);
  std::string text;
  int tokens = 0;
  for (size_t i = 0; i + 1 < events.data.size(); ++i) {
    const json chunk = json::parse(events.data[i]);
    EXPECT_EQ(chunk["stop"], false) << events.data[i];
    text += chunk["content"].get<std::string>();
    tokens += static_cast<int>(chunk["tokens"].size());
    EXPECT_EQ(chunk["tokens_predicted"], tokens);
  }
  const json last = json::parse(events.data.back());
  EXPECT_EQ(last["stop"], true);
  EXPECT_EQ(last["content"], "");
  EXPECT_EQ(text, want);
  EXPECT_EQ(tokens, want_tokens);
  EXPECT_EQ(last["tokens_predicted"], want_tokens);
  EXPECT_EQ(last["stop_type"], whole["stop_type"]);
  ExpectTimings(last);
}

TEST_F(LlamaServerApi, CompletionTakesTokenIdsMixedAndSeveralPrompts) {
  const json base = {{"n_predict", 6}, {"temperature", 0}};
  HttpResult text = Post("/completion", With(base, {{"prompt", kPrompt}}));
  ASSERT_EQ(text.status, 200) << text.body;
  const std::vector<int32_t> ids = Tokenize(kPrompt);
  HttpResult by_ids = Post("/completion", With(base, {{"prompt", ids}}));
  ASSERT_EQ(by_ids.status, 200) << by_ids.body;
  EXPECT_EQ(by_ids.Json()["content"], text.Json()["content"]);
  // "The capital" as ids, the rest as text: the same tokens.
  const std::vector<int32_t> head = Tokenize("The capital");
  json mixed = json(head);
  mixed.push_back(" of France is");
  HttpResult by_mix = Post("/completion", With(base, {{"prompt", mixed}}));
  ASSERT_EQ(by_mix.status, 200) << by_mix.body;
  EXPECT_EQ(by_mix.Json()["content"], text.Json()["content"]);
  EXPECT_EQ(by_mix.Json()["tokens_evaluated"], ids.size());
  // A list of strings is several prompts: a list of answers.
  HttpResult several = Post("/completion", With(base, {{"prompt", {kPrompt, "Once upon a time"}}}));
  ASSERT_EQ(several.status, 200) << several.body;
  const json answers = several.Json();
  ASSERT_TRUE(answers.is_array() && answers.size() == 2) << several.body;
  EXPECT_EQ(answers[0]["content"], text.Json()["content"]);
  EXPECT_EQ(answers[1]["index"], 1);
  // return_tokens: the generated ids.
  HttpResult with_ids = Post("/completion", With(base, {{"prompt", kPrompt}, {"return_tokens", true}}));
  ASSERT_EQ(with_ids.status, 200) << with_ids.body;
  const std::vector<int32_t> out = with_ids.Json()["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(out.size(), with_ids.Json()["tokens_predicted"].get<size_t>());
  EXPECT_EQ(Post("/detokenize", {{"tokens", out}}).Json()["content"], with_ids.Json()["content"]);
}

TEST_F(LlamaServerApi, NProbsComeInLlamaServersShape) {
  for (bool stream : {false, true}) {
    HttpResult r = Post("/completion", {{"prompt", kPrompt}, {"n_predict", 4}, {"temperature", 0},
                                        {"n_probs", 3}, {"stream", stream}});
    ASSERT_EQ(r.status, 200) << r.body;
    json probs = json::array();
    if (stream) {
      for (const std::string& e : ParseSse(r.body).data) {
        const json chunk = json::parse(e);
        if (chunk["stop"] == false) {
          EXPECT_EQ(chunk["completion_probabilities"].size(), chunk["tokens"].size()) << e;
          for (const json& p : chunk["completion_probabilities"]) probs.push_back(p);
        }
      }
    } else {
      probs = r.Json()["completion_probabilities"];
    }
    ASSERT_EQ(probs.size(), 4u) << r.body;
    for (const json& p : probs) {
      for (const char* key : {"id", "token", "bytes", "logprob", "top_logprobs"}) ASSERT_TRUE(p.contains(key)) << p;
      ASSERT_EQ(p["top_logprobs"].size(), 3u) << p;
      // Greedy: the chosen token is the most likely one.
      EXPECT_EQ(p["top_logprobs"][0]["id"], p["id"]);
      EXPECT_LE(p["logprob"].get<double>(), 0.0);
      EXPECT_GE(p["top_logprobs"][0]["logprob"].get<double>(), p["top_logprobs"][2]["logprob"].get<double>());
      std::string bytes;
      for (int b : p["bytes"]) bytes.push_back(static_cast<char>(b));
      EXPECT_EQ(bytes, p["token"].get<std::string>());
    }
  }
}

TEST_F(LlamaServerApi, StopWordsGrammarsAndNPredictZero) {
  HttpResult free_run = Post("/completion", {{"prompt", kPrompt}, {"n_predict", 12}, {"temperature", 0}});
  ASSERT_EQ(free_run.status, 200) << free_run.body;
  const std::string text = free_run.Json()["content"];
  ASSERT_GE(text.size(), 4u) << text;
  const std::string word = text.substr(2, 2);
  HttpResult r = Post("/completion", {{"prompt", kPrompt}, {"n_predict", 12}, {"temperature", 0}, {"stop", {"qqzz", word}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["content"], text.substr(0, text.find(word)));
  EXPECT_EQ(r.Json()["stop_type"], "word");
  EXPECT_EQ(r.Json()["stopping_word"], word);

  r = Post("/completion", {{"prompt", "Is the sky blue? Answer:"}, {"n_predict", 8}, {"temperature", 0},
                           {"grammar", "root ::= \" yes\" | \" no\""}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string answer = r.Json()["content"];
  EXPECT_TRUE(answer == " yes" || answer == " no") << answer;

  r = Post("/completion", {{"prompt", "A JSON object:"}, {"n_predict", 40}, {"temperature", 0},
                           {"json_schema", {{"type", "object"},
                                            {"properties", {{"ok", {{"type", "boolean"}}}}},
                                            {"required", {"ok"}}, {"additionalProperties", false}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json object = json::parse(r.Json()["content"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(object.is_object()) << r.body;
  EXPECT_TRUE(object["ok"].is_boolean()) << object;

  // n_predict 0: the prompt is evaluated, nothing generated.
  r = Post("/completion", {{"prompt", kPrompt}, {"n_predict", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["content"], "");
  EXPECT_EQ(r.Json()["tokens_predicted"], 0);
  EXPECT_EQ(r.Json()["tokens_evaluated"], Tokenize(kPrompt).size());
}

TEST_F(LlamaServerApi, PropsAndSlots) {
  HttpResult r = HttpCall(Http(), "GET", "/props");
  ASSERT_EQ(r.status, 200) << r.body;
  const json props = r.Json();
  const json& settings = props["default_generation_settings"];
  const int n_ctx = settings["n_ctx"];
  EXPECT_GT(n_ctx, 0);
  EXPECT_EQ(settings["params"]["temperature"], 0.8);
  EXPECT_EQ(settings["params"]["top_k"], 40);
  EXPECT_EQ(settings["params"]["n_predict"], -1);
  EXPECT_GE(props["total_slots"].get<int>(), 1);
  EXPECT_EQ(props["model_path"], "SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(props["model_alias"], "SmolLM2-135M-Instruct.Q4_1");
  EXPECT_NE(props["chat_template"].get<std::string>().find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(props["eos_token"], "<|im_end|>");
  EXPECT_EQ(props["modalities"]["vision"], false);
  EXPECT_TRUE(props["build_info"].is_string());
  // Changing properties is off, as in llama-server without --props.
  ExpectError(HttpCall(Http(), "POST", "/props", "{}"), "--props", 501);

  // Idle: one slot, free, with the same context.
  r = HttpCall(Http(), "GET", "/slots");
  ASSERT_EQ(r.status, 200) << r.body;
  json slots = r.Json();
  ASSERT_TRUE(slots.is_array() && !slots.empty()) << r.body;
  EXPECT_EQ(slots.back()["is_processing"], false);
  EXPECT_EQ(slots.back()["n_ctx"], n_ctx);
  // A long generation shows as a processing slot (the gateway polls the
  // scheduler every 250 ms).
  std::atomic<bool> done{false};
  std::thread busy([&] {
    Post("/completion", {{"prompt", kPrompt}, {"n_predict", 150}, {"ignore_eos", true}});
    done = true;
  });
  bool seen = false;
  for (int i = 0; i < 200 && !seen && !done; ++i) {
    slots = HttpCall(Http(), "GET", "/slots").Json();
    for (const json& s : slots) seen |= s["is_processing"] == true;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  busy.join();
  EXPECT_TRUE(seen) << "no processing slot while a request ran";
}

TEST_F(LlamaServerApi, ErrorsInLlamaServersShape) {
  ExpectError(HttpCall(Http(), "POST", "/tokenize", "{bad json"), "body");
  ExpectError(Post("/tokenize", {{"content", 5}}), "content");
  ExpectError(Post("/tokenize", {{"content", "x"}, {"with_pieces", "yes"}}), "with_pieces");
  ExpectError(Post("/detokenize", {{"tokens", {1, "two"}}}), "tokens");
  ExpectError(Post("/detokenize", {{"tokens", {1 << 30}}}), "tokens");
  ExpectError(HttpCall(Http(), "GET", "/tokenize"), "POST", 405);
  ExpectError(Post("/completion", {{"n_predict", 4}}), "prompt");
  ExpectError(Post("/completion", {{"prompt", kPrompt}, {"n_predict", "four"}}), "n_predict");
  ExpectError(Post("/completion", {{"prompt", kPrompt}, {"temperature", "hot"}}), "temperature");
  ExpectError(Post("/completion", {{"prompt", kPrompt}, {"stop", "."}}), "stop");
  ExpectError(Post("/completion", {{"prompt", kPrompt}, {"n_probs", 50}}), "n_probs");
  ExpectError(Post("/completion", {{"prompt", kPrompt}, {"mirostat", 2}}), "mirostat");
  ExpectError(Post("/completion", {{"prompt", kPrompt}, {"logit_bias", {{"Hello", 1.0}}}}), "logit_bias");
  ExpectError(Post("/completion", {{"prompt", kPrompt}, {"grammar", "root ::= ("}}), "grammar");
  ExpectError(Post("/completion", {{"prompt", {1, -5}}}), "prompt");
  // SmolLM2 has no fill-in-the-middle tokens: /infill names them.
  ExpectError(Post("/infill", {{"input_prefix", "def f("}, {"input_suffix", "):\n"}}),
              "has no prefix, suffix, middle token");
}

// SmolLM2 with a GGUF that names three of its special tokens as the FIM
// prefix, suffix and middle (llama.cpp reads the same keys); every other
// byte as in the original.
constexpr int32_t kFimPre = 8, kFimSuf = 9, kFimMid = 10;
constexpr int32_t kRepoName = 4;  // "<reponame>": llama.cpp's FIM_REP by its text

std::string WriteFimModel() {
  std::unique_ptr<GgufFile> src = GgufFile::Open(SmolLm2Path());
  GgufWriter out;
  for (const auto& [key, value] : src->metadata()) out.Set(key, *src->TypeOf(key), value);
  out.SetU32("tokenizer.ggml.fim_pre_token_id", kFimPre);
  out.SetU32("tokenizer.ggml.fim_suf_token_id", kFimSuf);
  out.SetU32("tokenizer.ggml.fim_mid_token_id", kFimMid);
  if (const GgufValue* a = src->Find("general.alignment")) out.set_alignment(static_cast<uint32_t>(*a->AsInt()));
  for (const auto& [name, t] : src->tensors()) out.AddTensor(name, t.dtype, t.shape, t.data, t.nbytes);
  const std::string path = TempDir() + "/SmolLM2-fim.gguf";
  out.Write(path);
  return path;
}

// Its own suite (run after LlamaServerApi's, whose stack is gone by then)
// over its own stack, in the same static slot.
class LlamaServerInfill : public LlamaServerApi {
 protected:
  static void SetUpTestSuite() {
    if (SmolLm2Path().empty()) return;
    stack_ = StartStack(WriteFimModel(), 1).release();
    ASSERT_TRUE(WaitForHttpHealth(Http()));
  }
};

TEST_F(LlamaServerInfill, InfillPromptIsLlamaServersLayoutOfTheFimTokens) {
  const json body = {{"input_prefix", "def add(a, b):\n    return "},
                     {"input_suffix", "\n\nprint(add(1, 2))\n"},
                     {"input_extra", {{{"filename", "util.py"}, {"text", "import math\n"}}}},
                     {"prompt", "a"},
                     {"n_predict", 8},
                     {"temperature", 0}};
  HttpResult r = Post("/infill", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json infill = r.Json();
  // The prompt as llama-server lays it out: the extra context (this vocab
  // has a repository token but no file separator), then prefix, prompt,
  // suffix between the FIM tokens; the extra context's budget is
  // n_ctx - 2048 + 2 tokens, its tail kept.
  std::vector<int32_t> extra = {kRepoName};
  for (const char* part : {"myproject\n", "\n\n--- snippet ---\n\n", "import math\n"}) {
    for (int32_t id : Tokenize(part)) extra.push_back(id);
  }
  const int n_ctx = HttpCall(Http(), "GET", "/props").Json()["default_generation_settings"]["n_ctx"];
  const size_t take = std::min<size_t>(extra.size(), std::max(0, n_ctx - 2048 + 2));
  std::vector<int32_t> ids(extra.end() - take, extra.end());
  ids.push_back(kFimPre);
  for (int32_t id : Tokenize(body["input_prefix"].get<std::string>())) ids.push_back(id);
  for (int32_t id : Tokenize("a")) ids.push_back(id);
  ids.push_back(kFimSuf);
  for (int32_t id : Tokenize(body["input_suffix"].get<std::string>())) ids.push_back(id);
  ids.push_back(kFimMid);
  EXPECT_EQ(infill["tokens_evaluated"], ids.size());
  HttpResult same = Post("/completion", {{"prompt", ids}, {"n_predict", 8}, {"temperature", 0}});
  ASSERT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(infill["content"], same.Json()["content"]);
  EXPECT_GT(infill["tokens_predicted"].get<int>(), 0);
  ExpectTimings(infill);
  // Streamed like /completion.
  r = Post("/infill", With(body, {{"stream", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  std::string text;
  for (const std::string& e : ParseSse(r.body).data) text += json::parse(e)["content"].get<std::string>();
  EXPECT_EQ(text, infill["content"]);
  // Its own fields are checked.
  ExpectError(Post("/infill", {{"input_suffix", "x"}}), "input_prefix");
  ExpectError(Post("/infill", {{"input_prefix", "x"}, {"input_suffix", "y"}, {"input_extra", "z"}}), "input_extra");
  ExpectError(Post("/infill", {{"input_prefix", "x"}, {"input_suffix", "y"}, {"input_extra", {{{"filename", "a"}}}}}),
              "input_extra[0]");
}

// In-process: the FIM tokens found by their texts, as llama.cpp finds
// them in a vocabulary whose GGUF names none.
TEST(LlamaServerFimTokens, FoundByTheirTextsOrTheGgufsKeys) {
  const json pieces = {"a", "b", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_repo|>",
                       "<|file_sep|>", "<|fim_pad|>"};
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < pieces.size(); ++i) {
    vocab[pieces[i].get<std::string>()] = i;
    if (i >= 2) added.push_back({{"id", i}, {"content", pieces[i]}, {"special", true}});
  }
  const std::string file = TempDir() + "/fim-tokenizer.json";
  std::ofstream(file) << json{{"added_tokens", added},
                              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}}
                             .dump();
  const std::unique_ptr<Tokenizer> tiny = LoadTokenizerJson(file);
  FimTokens fim = FindFimTokens(tiny.get(), nullptr);
  EXPECT_EQ(std::vector<int32_t>({fim.pre, fim.suf, fim.mid, fim.rep, fim.sep, fim.pad}),
            std::vector<int32_t>({2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(fim.usable());
  EXPECT_EQ(fim.Missing(), "");
  // No tokenizer: none.
  EXPECT_EQ(FindFimTokens(nullptr, nullptr).Missing(), "prefix, suffix, middle");

  ASSERT_FALSE(SmolLm2Path().empty()) << "SmolLM2 is fetched by scripts/setup.sh";
  const std::unique_ptr<GgufFile> smol = GgufFile::Open(SmolLm2Path());
  const std::unique_ptr<Tokenizer> smol_tok = LoadGgufTokenizer(*smol);
  fim = FindFimTokens(smol_tok.get(), smol.get());
  EXPECT_EQ(fim.Missing(), "prefix, suffix, middle");
  EXPECT_EQ(fim.rep, kRepoName);  // "<reponame>", by its text
  const std::unique_ptr<GgufFile> copy = GgufFile::Open(WriteFimModel());
  fim = FindFimTokens(smol_tok.get(), copy.get());
  EXPECT_EQ(std::vector<int32_t>({fim.pre, fim.suf, fim.mid, fim.sep}),
            std::vector<int32_t>({kFimPre, kFimSuf, kFimMid, -1}));
}

// In-process: /infill's layout with a file separator (the repository
// pattern), and llama-server's budgets cutting a long prefix and suffix.
TEST(LlamaServerInfillPrompt, RepositoryPatternAndBudgets) {
  ASSERT_FALSE(SmolLm2Path().empty()) << "SmolLM2 is fetched by scripts/setup.sh";
  const std::unique_ptr<GgufFile> gguf = GgufFile::Open(SmolLm2Path());
  const std::unique_ptr<Tokenizer> tok = LoadGgufTokenizer(*gguf);
  FimTokens fim;
  fim.pre = kFimPre, fim.suf = kFimSuf, fim.mid = kFimMid, fim.rep = kRepoName, fim.sep = 5;
  const auto encode = [&](const std::string& text) { return tok->Encode(text, false, false); };
  const auto append = [](std::vector<int32_t>* to, const std::vector<int32_t>& more) {
    to->insert(to->end(), more.begin(), more.end());
  };
  const json body = {{"input_prefix", "x = 1\n"}, {"input_suffix", "print(x)"}, {"prompt", "y"},
                     {"input_extra", {{{"filename", "a.py"}, {"text", "import os\n"}}, {{"text", "z = 2"}}}}};
  std::vector<int32_t> ids;
  ASSERT_FALSE(llama_server::InfillPrompt(body, *tok, fim, 4096, &ids));
  std::vector<int32_t> extra = {kRepoName};
  append(&extra, encode("myproject\n"));
  extra.push_back(5);
  append(&extra, encode("a.py\n"));
  append(&extra, encode("import os\n"));
  extra.push_back(5);
  append(&extra, encode("tmp\n"));  // a chunk without a filename
  append(&extra, encode("z = 2"));
  extra.push_back(5);
  append(&extra, encode("filename\n"));
  std::vector<int32_t> fill = {kFimPre};
  append(&fill, encode("x = 1\n"));
  append(&fill, encode("y"));
  fill.push_back(kFimSuf);
  append(&fill, encode("print(x)"));
  fill.push_back(kFimMid);
  std::vector<int32_t> want = extra;
  append(&want, fill);
  EXPECT_EQ(ids, want);
  // A context of 2048 leaves the extra context 2 tokens: its tail.
  ASSERT_FALSE(llama_server::InfillPrompt(body, *tok, fim, 2048, &ids));
  want.assign(extra.end() - 2, extra.end());
  append(&want, fill);
  EXPECT_EQ(ids, want);
  // Long inputs: the prefix's last 1536 tokens, the suffix's first 512 - 2 - 1.
  std::string long_text;
  for (int i = 0; i < 3000; ++i) long_text += " w" + std::to_string(i);
  const std::vector<int32_t> long_ids = encode(long_text);
  ASSERT_GT(long_ids.size(), 3000u);
  ASSERT_FALSE(llama_server::InfillPrompt({{"input_prefix", long_text}, {"input_suffix", long_text}, {"prompt", "y"}},
                                          *tok, FimTokens{kFimPre, kFimSuf, kFimMid}, 512, &ids));
  ASSERT_EQ(ids.size(), 1 + 1536 + 1 + 1 + 509 + 1u);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.begin() + 1537),
            std::vector<int32_t>(long_ids.end() - 1536, long_ids.end()));
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1539, ids.begin() + 1539 + 509),
            std::vector<int32_t>(long_ids.begin(), long_ids.begin() + 509));
}

}  // namespace
}  // namespace specline::testing
