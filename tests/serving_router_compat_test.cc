// A real `specline serve` on loopback, as vLLM's router (vllm-router
// 0.1.17, docs/routers.md) talks to a worker: the bodies it forwards, with
// vLLM's and SGLang's fields set to their defaults, answered as without
// them; the render endpoints it calls before routing, whose token_ids are
// the prompt the generation gets; continue_final_message; the probes
// (/health, /get_load, /get_server_info, /v1/models); and the 400s naming
// what cannot be honoured. The router itself is not started here.
#include <fstream>
#include <thread>

#include "tests/http_test_client.h"
#include "tests/router_bodies.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

using nlohmann::json;

std::string Stories260K() { return SharedModelPath("stories260K/stories260K.bin"); }

std::string TemplateFile() { return RoleColonChatTemplate(); }

// The router's bodies (tests/router_bodies.h), greedy.
json RouterChat(const json& messages, int max_tokens) {
  json body = RouterChatBody(messages, max_tokens);
  body["temperature"] = 0;
  return body;
}
json RouterCompletion(const json& prompt, int max_tokens) {
  json body = RouterCompletionBody(prompt, max_tokens);
  body["temperature"] = 0;
  return body;
}

class RouterCompat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (Stories260K().empty()) return;
    stack_ = StartStack(Stories260K(), 1, {"--chat-template", TemplateFile()}).release();
    ready_ = WaitForHttpHealth(Http());
    model_ = OpenModel(Stories260K()).release();
    tokenizer_ = OpenTokenizerFor(*model_).release();
  }
  static void TearDownTestSuite() {
    delete stack_;
    delete tokenizer_;
    delete model_;
    stack_ = nullptr;
    ready_ = false;
  }
  void SetUp() override {
    if (!stack_) GTEST_SKIP() << "../shared/models/stories260K absent";
    ASSERT_TRUE(ready_) << "the gateway did not answer GET /health with 200 within 60 s";
  }
  static int Http() { return stack_->ports["gateway"]["http"].get<int>(); }
  // The prompt /apply-template renders for a chat body, as token ids the
  // way every chat prompt is encoded.
  static std::vector<int32_t> TemplateIds(const json& body) {
    HttpResult r = PostJson(Http(), "/apply-template", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return tokenizer_->Encode(r.Json().value("prompt", ""), false, true);
  }
  static ServingStack* stack_;
  static bool ready_;
  static ModelSource* model_;
  static Tokenizer* tokenizer_;
};
ServingStack* RouterCompat::stack_ = nullptr;
bool RouterCompat::ready_ = false;
ModelSource* RouterCompat::model_ = nullptr;
Tokenizer* RouterCompat::tokenizer_ = nullptr;

std::string ChatText(const HttpResult& r) {
  return r.Json()["choices"][0]["message"]["content"].get<std::string>();
}

// The router's bodies are served, and answered as the same request
// without the extra fields (greedy: the same text and usage).
TEST_F(RouterCompat, TheRoutersBodiesAreServedAsWithoutTheirExtras) {
  const json chat = RouterChat(UserChat("Once upon a time"), 12);
  HttpResult routed = PostJson(Http(), "/v1/chat/completions", chat);
  ASSERT_EQ(routed.status, 200) << routed.body;
  HttpResult plain = PostJson(Http(), "/v1/chat/completions",
                              {{"messages", UserChat("Once upon a time")}, {"max_tokens", 12},
                               {"temperature", 0}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(ChatText(routed), ChatText(plain));
  // (The second is served partly from the prefix cache: cached_tokens differ.)
  EXPECT_EQ(routed.Json()["usage"]["prompt_tokens"], plain.Json()["usage"]["prompt_tokens"]);
  EXPECT_EQ(routed.Json()["usage"]["completion_tokens"], plain.Json()["usage"]["completion_tokens"]);

  json streamed = chat;
  streamed["stream"] = true;
  HttpResult s = PostJson(Http(), "/v1/chat/completions", streamed);
  ASSERT_EQ(s.status, 200) << s.body;
  const SseEvents events = ParseSse(s.body);
  ASSERT_FALSE(events.data.empty());
  EXPECT_EQ(events.data.back(), "[DONE]");
  std::string text;
  for (const std::string& d : events.data) {
    if (d == "[DONE]") continue;
    text += json::parse(d)["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, ChatText(plain));

  HttpResult completion = PostJson(Http(), "/v1/completions", RouterCompletion("Once upon a time", 12));
  ASSERT_EQ(completion.status, 200) << completion.body;
  HttpResult plain_completion = PostJson(
      Http(), "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(completion.Json()["choices"][0]["text"], plain_completion.Json()["choices"][0]["text"]);

  // The Responses API with the defaults the router writes.
  HttpResult responses = PostJson(
      Http(), "/v1/responses",
      {{"input", "Once upon a time"}, {"max_output_tokens", 8}, {"temperature", 0},
       {"background", false}, {"parallel_tool_calls", true}, {"service_tier", "auto"},
       {"store", true}, {"stream", false}, {"tool_choice", "auto"}, {"tools", json::array()},
       {"top_logprobs", 0}, {"truncation", "disabled"}, {"request_id", "resp_abc"},
       {"priority", 0}, {"frequency_penalty", 0.0}, {"presence_penalty", 0.0}, {"top_k", -1},
       {"min_p", 0.0}, {"repetition_penalty", 1.0}});
  EXPECT_EQ(responses.status, 200) << responses.body;
  EXPECT_EQ(responses.Json()["object"], "response") << responses.body;
}

TEST_F(RouterCompat, WhatCannotBeHonouredIsA400NamingIt) {
  for (const char* target : {"/v1/chat/completions", "/v1/chat/completions/render"}) {
    json body = RouterChat(UserChat("Hi"), 4);
    body["min_tokens"] = 2;
    HttpResult r = PostJson(Http(), target, body);
    ASSERT_EQ(r.status, 400) << target << ": " << r.body;
    EXPECT_EQ(r.Json()["error"]["param"], "min_tokens");
    body = RouterChat(UserChat("Hi"), 4);
    body["return_hidden_states"] = true;
    r = PostJson(Http(), target, body);
    ASSERT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.Json()["error"]["param"], "return_hidden_states");
  }
  json body = RouterChat(UserChat("Hi"), 4);
  body["continue_final_message"] = true;  // the last message is the user's
  HttpResult r = PostJson(Http(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.Json()["error"]["param"], "continue_final_message");
}

// vLLM's render endpoints, as the router calls them: the same body, the
// prompt's token ids back in vLLM's GenerateRequest shape, equal to what
// the generation gets (the template's prompt, encoded as chat prompts are;
// as many as the completion's usage.prompt_tokens).
TEST_F(RouterCompat, RenderEndpointsAnswerThePromptsTokenIds) {
  const json chat = RouterChat(UserChat("Once upon a time"), 12);
  HttpResult r = PostJson(Http(), "/v1/chat/completions/render", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  const json rendered = r.Json();
  ASSERT_TRUE(rendered.is_object()) << r.body;
  EXPECT_EQ(rendered["request_id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const auto ids = rendered["token_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(ids, TemplateIds({{"messages", UserChat("Once upon a time")}}));
  EXPECT_TRUE(rendered["features"].is_null());
  EXPECT_EQ(rendered["sampling_params"]["max_tokens"], 12);
  HttpResult generated = PostJson(Http(), "/v1/chat/completions", chat);
  ASSERT_EQ(generated.status, 200) << generated.body;
  EXPECT_EQ(generated.Json()["usage"]["prompt_tokens"], ids.size());

  // Completions: a list, one per prompt; text prompts encoded as the
  // completion encodes them, token ids as sent.
  json completion = RouterCompletion(json::array({"Once upon a time", "The cat"}), 4);
  r = PostJson(Http(), "/v1/completions/render", completion);
  ASSERT_EQ(r.status, 200) << r.body;
  json list = r.Json();
  ASSERT_TRUE(list.is_array()) << r.body;
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["token_ids"].get<std::vector<int32_t>>(),
            tokenizer_->Encode("Once upon a time", tokenizer_->add_bos_by_default()));
  EXPECT_EQ(list[1]["token_ids"].get<std::vector<int32_t>>(),
            tokenizer_->Encode("The cat", tokenizer_->add_bos_by_default()));
  EXPECT_NE(list[0]["request_id"], list[1]["request_id"]);
  r = PostJson(Http(), "/v1/completions/render", RouterCompletion(json::array({5, 6, 7}), 4));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json().at(0)["token_ids"], json::array({5, 6, 7}));

  // The Responses API's render, which the router calls for /v1/responses.
  r = PostJson(Http(), "/v1/responses/render", {{"input", "Once upon a time"}, {"max_output_tokens", 4}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["token_ids"].get<std::vector<int32_t>>(), ids);

  // Errors as the generation's: another model is 404, a GET 405, a bad
  // field 400 naming it.
  json other = chat;
  other["model"] = "nope";
  EXPECT_EQ(PostJson(Http(), "/v1/chat/completions/render", other).status, 404);
  EXPECT_EQ(HttpCall(Http(), "GET", "/v1/chat/completions/render").status, 405);
  json bad = chat;
  bad["skip_special_tokens"] = "no";
  r = PostJson(Http(), "/v1/chat/completions/render", bad);
  ASSERT_EQ(r.status, 400);
  EXPECT_EQ(r.Json()["error"]["param"], "skip_special_tokens");
}

// continue_final_message: the prompt stops right after the assistant's
// partial message (no newline, no new turn), and the generation continues
// it.
TEST_F(RouterCompat, ContinueFinalMessageContinuesTheLastTurn) {
  const json messages = {{{"role", "user"}, {"content", "Tell me a story."}},
                         {{"role", "assistant"}, {"content", "Once upon"}}};
  json body = RouterChat(messages, 8);
  body["continue_final_message"] = true;
  HttpResult t = PostJson(Http(), "/apply-template", body);
  ASSERT_EQ(t.status, 200) << t.body;
  const std::string prompt = t.Json()["prompt"];
  const std::string tail = "user: Tell me a story.\nassistant: Once upon";
  ASSERT_GE(prompt.size(), tail.size());
  EXPECT_EQ(prompt.substr(prompt.size() - tail.size()), tail) << prompt;
  HttpResult r = PostJson(Http(), "/v1/chat/completions/render", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["token_ids"].get<std::vector<int32_t>>(), tokenizer_->Encode(prompt, false, true));
  HttpResult g = PostJson(Http(), "/v1/chat/completions", body);
  ASSERT_EQ(g.status, 200) << g.body;
  EXPECT_EQ(g.Json()["usage"]["prompt_tokens"], tokenizer_->Encode(prompt, false, true).size());
  body["add_generation_prompt"] = true;
  r = PostJson(Http(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.Json()["error"]["param"], "continue_final_message");
}

// What the router probes besides the API.
TEST_F(RouterCompat, ProbesAnswer) {
  HttpResult load = HttpCall(Http(), "GET", "/get_load");
  ASSERT_EQ(load.status, 200) << load.body;
  EXPECT_EQ(load.Json()["load"], 0);
  HttpResult info = HttpCall(Http(), "GET", "/get_server_info");
  ASSERT_EQ(info.status, 200) << info.body;
  EXPECT_EQ(info.Json()["model_id"], "stories260K");
  EXPECT_GT(info.Json()["max_model_len"].get<int>(), 0);
  HttpResult model_info = HttpCall(Http(), "GET", "/get_model_info");
  ASSERT_EQ(model_info.status, 200) << model_info.body;
  EXPECT_EQ(model_info.Json()["is_generation"], true);
  EXPECT_EQ(HttpCall(Http(), "POST", "/get_load").status, 405);
  HttpResult models = HttpCall(Http(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.Json()["data"][0]["id"], "stories260K");
}

}  // namespace
}  // namespace specline::testing
