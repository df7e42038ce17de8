// The OpenAI request bodies into GenerateRequest, and the response bodies
// out of GenerateResponse (services/openai/): every field honoured or
// refused by name, OpenAI's shapes on the way out.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "services/openai/openai_response.h"

namespace specline::openai {
namespace {

using nlohmann::json;

ParsedRequest ParseOk(Endpoint e, const json& body) {
  ParsedRequest out;
  const auto error = ParseRequest(e, body.dump(), &out);
  EXPECT_FALSE(error) << (error ? error->message : "");
  return out;
}

ApiError ParseFails(Endpoint e, const std::string& body) {
  ParsedRequest out;
  const auto error = ParseRequest(e, body, &out);
  EXPECT_TRUE(error) << body;
  return error.value_or(ApiError{});
}

TEST(OpenAiRequest, CompletionFieldsMapToTheGenerateRequest) {
  const ParsedRequest p = ParseOk(
      Endpoint::kCompletions,
      {{"model", "m"}, {"prompt", "Hello"}, {"max_tokens", 12}, {"temperature", 0.5},
       {"top_p", 0.9}, {"top_k", 40}, {"min_p", 0.05}, {"repetition_penalty", 1.1},
       {"seed", 7}, {"stop", {"\n", "END"}}, {"stop_token_ids", {2, 3}}, {"ignore_eos", true},
       {"stream", true}, {"stream_options", {{"include_usage", true}}}, {"n", 1},
       {"user", "alice"}, {"policy", "ppsd"}, {"frequency_penalty", 0},
       {"presence_penalty", nullptr}, {"logprobs", nullptr}});
  const v1::GenerateRequest& r = p.request;
  EXPECT_EQ(p.model, "m");
  EXPECT_EQ(r.text(), "Hello");
  EXPECT_EQ(r.max_tokens(), 12);
  EXPECT_FLOAT_EQ(r.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(r.sampling().top_p(), 0.9f);
  EXPECT_EQ(r.sampling().top_k(), 40);
  EXPECT_FLOAT_EQ(r.sampling().min_p(), 0.05f);
  EXPECT_FLOAT_EQ(r.sampling().repetition_penalty(), 1.1f);
  ASSERT_TRUE(r.sampling().has_seed());
  EXPECT_EQ(r.sampling().seed(), 7u);
  ASSERT_EQ(r.stop_size(), 2);
  EXPECT_EQ(r.stop(1), "END");
  ASSERT_EQ(r.stop_token_ids_size(), 2);
  EXPECT_TRUE(r.ignore_eos());
  EXPECT_EQ(r.policy(), v1::DECODING_POLICY_PPSD);
  EXPECT_TRUE(p.stream);
  EXPECT_TRUE(p.include_usage);
  EXPECT_EQ(p.user, "alice");
}

TEST(OpenAiRequest, DefaultsFollowOpenAi) {
  const ParsedRequest p = ParseOk(Endpoint::kCompletions, {{"prompt", "x"}});
  EXPECT_FLOAT_EQ(p.request.sampling().temperature(), 1.0f);  // OpenAI samples by default
  EXPECT_FALSE(p.request.sampling().has_seed());
  EXPECT_EQ(p.request.max_tokens(), 0);  // the server's default
  EXPECT_FALSE(p.stream);
  // vLLM's top_k = -1 is "off".
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, {{"prompt", "x"}, {"top_k", -1}}).request.sampling().top_k(), 0);
}

TEST(OpenAiRequest, PromptShapes) {
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, {{"prompt", {1, 2, 3}}}).request.token_ids().ids_size(), 3);
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, {{"prompt", {"one"}}}).request.text(), "one");
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, {{"prompt", {{4, 5}}}}).request.token_ids().ids(1), 5);
  EXPECT_EQ(ParseFails(Endpoint::kCompletions, R"({"prompt": ["a", "b"]})").param, "prompt");
  EXPECT_EQ(ParseFails(Endpoint::kCompletions, R"({"prompt": [1, -2]})").param, "prompt");
  EXPECT_EQ(ParseFails(Endpoint::kCompletions, R"({"prompt": 5})").param, "prompt");
}

TEST(OpenAiRequest, ChatMessagesAndContentParts) {
  const ParsedRequest p = ParseOk(
      Endpoint::kChatCompletions,
      {{"messages",
        {{{"role", "developer"}, {"content", "Be brief."}},
         {{"role", "user"},
          {"content", {{{"type", "text"}, {"text", "Hi "}}, {{"type", "text"}, {"text", "there"}}}}}}},
       {"max_completion_tokens", 9},
       {"max_tokens", 100}});
  ASSERT_EQ(p.request.chat().messages_size(), 2);
  EXPECT_EQ(p.request.chat().messages(0).role(), "system");
  EXPECT_EQ(p.request.chat().messages(1).content(), "Hi there");
  EXPECT_EQ(p.request.max_tokens(), 9);  // the newer name wins
  EXPECT_EQ(ParseFails(Endpoint::kChatCompletions,
                       R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})")
                .param,
            "messages[0].content[0]");
  EXPECT_EQ(ParseFails(Endpoint::kChatCompletions, R"({"messages": [{"role": "user"}]})").param,
            "messages[0].content");
  // Chat-only and completion-only fields stay on their endpoint.
  EXPECT_EQ(ParseFails(Endpoint::kCompletions, R"({"prompt": "x", "messages": []})").param, "messages");
  EXPECT_EQ(ParseFails(Endpoint::kChatCompletions,
                       R"({"messages": [{"role": "user", "content": "x"}], "echo": true})")
                .param,
            "echo");
}

TEST(OpenAiRequest, UnsupportedFieldsAreRefusedByName) {
  for (const char* body :
       {R"({"prompt": "x", "frequency_penalty": 0.1})", R"({"prompt": "x", "presence_penalty": -1})",
        R"({"prompt": "x", "logprobs": 1})", R"({"prompt": "x", "echo": true})",
        R"({"prompt": "x", "best_of": 3})", R"({"prompt": "x", "logit_bias": {"5": 1}})",
        R"({"prompt": "x", "n": 3})", R"({"prompt": "x", "suffix": "y"})",
        R"({"prompt": "x", "response_format": {"type": "json_object"}})",
        R"({"prompt": "x", "whatever": 1})"}) {
    const ApiError e = ParseFails(Endpoint::kCompletions, body);
    EXPECT_EQ(e.http_status, 400);
    EXPECT_FALSE(e.param.empty()) << body;
    EXPECT_EQ(e.message.rfind(e.param + ":", 0), 0u) << e.message;
  }
  EXPECT_EQ(ParseFails(Endpoint::kChatCompletions,
                       R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})")
                .param,
            "logprobs");
  EXPECT_EQ(ParseFails(Endpoint::kChatCompletions,
                       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{}]})")
                .param,
            "tools[0].type");
}

TEST(OpenAiRequest, TypeAndRangeErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : {Case{R"({"prompt": "x", "temperature": 2.5})", "temperature"},
                        Case{R"({"prompt": "x", "temperature": "warm"})", "temperature"},
                        Case{R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
                        Case{R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
                        Case{R"({"prompt": "x", "top_k": -5})", "top_k"},
                        Case{R"({"prompt": "x", "stop": [1]})", "stop[0]"},
                        Case{R"({"prompt": "x", "stream": "yes"})", "stream"},
                        Case{R"({"prompt": "x", "stream_options": {"include_usage": true}})",
                             "stream_options"},
                        Case{R"({"prompt": "x", "stream": true, "stream_options": {"x": 1}})",
                             "stream_options.x"},
                        Case{R"({"prompt": "x", "seed": 18446744073709551615})", "seed"},
                        Case{R"({"prompt": "x", "policy": "fast"})", "policy"},
                        Case{R"({"prompt": "x", "stop_token_ids": [-1]})", "stop_token_ids[0]"},
                        Case{R"({"prompt": "x", "cache_salt": 7})", "cache_salt"},
                        Case{R"({"prompt": "x", "cache_salt": ""})", "cache_salt"}}) {
    EXPECT_EQ(ParseFails(Endpoint::kCompletions, c.body).param, c.param) << c.body;
  }
  EXPECT_TRUE(ParseFails(Endpoint::kCompletions, "{not json").param.empty());
  EXPECT_TRUE(ParseFails(Endpoint::kCompletions, "[]").param.empty());
}

// vLLM's cache_salt, on both endpoints: carried as it is; null = none.
TEST(OpenAiRequest, CacheSaltIsCarried) {
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, {{"prompt", "x"}, {"cache_salt", "s-1"}}).request.cache_salt(),
            "s-1");
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"cache_salt", "s-2"}};
  EXPECT_EQ(ParseOk(Endpoint::kChatCompletions, chat).request.cache_salt(), "s-2");
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, {{"prompt", "x"}, {"cache_salt", nullptr}}).request.cache_salt(),
            "");
  // Its length is the shared validation's, named in OpenAI's terms.
  std::string param;
  ToOpenAiMessage(Endpoint::kCompletions, "cache_salt: longer than 256 bytes", &param);
  EXPECT_EQ(param, "cache_salt");
}

TEST(OpenAiRequest, ValidationMessagesUseOpenAiNames) {
  std::string param;
  EXPECT_EQ(ToOpenAiMessage(Endpoint::kCompletions, "sampling.top_p: must be in [0, 1]", &param),
            "top_p: must be in [0, 1]");
  EXPECT_EQ(param, "top_p");
  ToOpenAiMessage(Endpoint::kChatCompletions, "prompt.chat.messages[2].role: bad", &param);
  EXPECT_EQ(param, "messages[2].role");
  ToOpenAiMessage(Endpoint::kChatCompletions, "prompt.chat: no chat template", &param);
  EXPECT_EQ(param, "messages");
  ToOpenAiMessage(Endpoint::kCompletions, "prompt.token_ids: id 9 is outside", &param);
  EXPECT_EQ(param, "prompt");
  EXPECT_EQ(ToOpenAiMessage(Endpoint::kCompletions, "no field here", &param), "no field here");
  EXPECT_TRUE(param.empty());
}

TEST(OpenAiResponse, ChunksResponsesAndErrors) {
  const ResponseIdentity chat{Endpoint::kChatCompletions, "chatcmpl-1", 1700000000, "m"};
  v1::GenerateResponse msg;
  msg.set_text("Hi");
  json first = json::parse(StreamChunk(chat, msg, true));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "Hi");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  msg.set_text("");
  msg.set_finish_reason(v1::FINISH_REASON_LENGTH);
  json last = json::parse(StreamChunk(chat, msg, false));
  EXPECT_FALSE(last["choices"][0]["delta"].contains("content"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");

  v1::Usage usage;
  usage.set_prompt_tokens(3);
  usage.set_completion_tokens(5);
  json u = json::parse(UsageChunk(chat, usage));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 8);

  const ResponseIdentity cmpl{Endpoint::kCompletions, "cmpl-1", 1700000000, "m"};
  json whole = json::parse(FullResponse(cmpl, "text", v1::FINISH_REASON_STOP, usage));
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "text");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  json chat_whole = json::parse(FullResponse(chat, "text", v1::FINISH_REASON_LENGTH, usage));
  EXPECT_EQ(chat_whole["object"], "chat.completion");
  EXPECT_EQ(chat_whole["choices"][0]["message"]["role"], "assistant");

  // Invalid UTF-8 from the model cannot break the JSON.
  v1::GenerateResponse bad;
  bad.set_text(std::string("\xff", 1));
  EXPECT_FALSE(json::parse(StreamChunk(cmpl, bad, false), nullptr, false).is_discarded());

  const ApiError e = ErrorFromStatus(Endpoint::kCompletions, 3, "sampling.top_k: must be >= 0");
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, "top_k");
  json body = json::parse(ErrorBody(e));
  EXPECT_EQ(body["error"]["message"], "top_k: must be >= 0");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(body["error"]["code"].is_null());
  EXPECT_EQ(ErrorFromStatus(Endpoint::kCompletions, 8, "full").http_status, 429);
  EXPECT_EQ(ErrorFromStatus(Endpoint::kCompletions, 14, "draining").http_status, 503);
  EXPECT_EQ(ErrorFromStatus(Endpoint::kCompletions, 16, "who").http_status, 401);
}

}  // namespace
}  // namespace specline::openai
