// The OpenAI request bodies into GenerateRequest, and the response bodies
// out of GenerateResponse (services/openai/): every field honoured or
// refused by name, OpenAI's shapes on the way out.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "services/openai/cors.h"
#include "services/openai/openai_response.h"
#include "services/openai/responses_api.h"

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
  EXPECT_EQ(ParseFails(Endpoint::kCompletions, R"({"prompt": ["a", 5]})").param, "prompt");
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
       {R"({"prompt": "x", "best_of": 3})",
        R"({"prompt": "x", "suffix": "y"})", R"({"prompt": "x", "modalities": ["audio"]})",
        R"({"prompt": "x", "response_format": {"type": "xml"}})",
        R"({"prompt": "x", "whatever": 1})"}) {
    const ApiError e = ParseFails(Endpoint::kCompletions, body);
    EXPECT_EQ(e.http_status, 400);
    EXPECT_FALSE(e.param.empty()) << body;
    EXPECT_EQ(e.message.rfind(e.param + ":", 0), 0u) << e.message;
  }
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
                        Case{R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
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
  const ResponseIdentity chat{Endpoint::kChatCompletions, "chatcmpl-1", 1700000000, "m", "fp_x"};
  // OpenAI's framing: a role-only first chunk, text chunks with a null
  // finish_reason, and an empty-delta chunk that carries the finish.
  json role = json::parse(RoleChunk(chat, 0));
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["system_fingerprint"], "fp_x");
  EXPECT_EQ(role["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  json text = json::parse(TextChunk(chat, 2, "Hi"));
  EXPECT_EQ(text["choices"][0]["index"], 2);
  EXPECT_EQ(text["choices"][0]["delta"], json({{"content", "Hi"}}));
  EXPECT_TRUE(text["choices"][0]["finish_reason"].is_null());
  json last = json::parse(FinishChunk(chat, 0, v1::FINISH_REASON_LENGTH));
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");

  v1::Usage usage;
  usage.set_prompt_tokens(3);
  usage.set_completion_tokens(5);
  json u = json::parse(UsageChunk(chat, usage));
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 8);

  const ResponseIdentity cmpl{Endpoint::kCompletions, "cmpl-1", 1700000000, "m", "fp_x"};
  json whole = json::parse(FullResponse(cmpl, {{"text", v1::FINISH_REASON_STOP, {}}}, usage));
  EXPECT_EQ(whole["system_fingerprint"], "fp_x");
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "text");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  json chat_whole = json::parse(FullResponse(
      chat, {{"a", v1::FINISH_REASON_LENGTH, {}}, {"b", v1::FINISH_REASON_STOP, {}}}, usage));
  EXPECT_EQ(chat_whole["object"], "chat.completion");
  ASSERT_EQ(chat_whole["choices"].size(), 2u);
  EXPECT_EQ(chat_whole["choices"][1]["index"], 1);
  EXPECT_EQ(chat_whole["choices"][1]["message"], json({{"role", "assistant"}, {"content", "b"}}));

  // Invalid UTF-8 from the model cannot break the JSON.
  EXPECT_FALSE(json::parse(TextChunk(cmpl, 0, std::string("\xff", 1)), nullptr, false).is_discarded());

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
  // The request builder's context error: OpenAI's code, the prompt's field.
  const ApiError ctx = ErrorFromStatus(Endpoint::kChatCompletions, 3,
                                       "prompt: has 900 tokens; the limit is 511 (context length 512)",
                                       "context_length_exceeded");
  EXPECT_EQ(ctx.code, "context_length_exceeded");
  EXPECT_EQ(ctx.param, "messages");
  EXPECT_EQ(ErrorFromStatus(Endpoint::kCompletions, 3, "prompt: has 9 tokens", "context_length_exceeded").param,
            "prompt");
}

TEST(OpenAiResponse, SystemFingerprintIsStablePerModel) {
  const std::string a = SystemFingerprint("smollm2", 49152, 8192);
  EXPECT_EQ(a, SystemFingerprint("smollm2", 49152, 8192));
  EXPECT_NE(a, SystemFingerprint("other", 49152, 8192));
  EXPECT_EQ(a.rfind("fp_specline-", 0), 0u) << a;
}

// What OpenAI accepts and ignores is accepted; what would change the output
// and is not supported is refused by name.
TEST(OpenAiRequest, AcceptsOpenAiFieldsThatDoNotChangeTheOutput) {
  const json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                     {"store", false},
                     {"metadata", {{"k", "v"}}},
                     {"service_tier", "auto"},
                     {"modalities", {"text"}},
                     {"reasoning_effort", "low"},
                     {"user", "u"}};
  ParseOk(Endpoint::kChatCompletions, chat);
  json audio = chat;
  audio["modalities"] = {"text", "audio"};
  EXPECT_EQ(ParseFails(Endpoint::kChatCompletions, audio.dump()).param, "modalities");
}

TEST(OpenAiRequest, AssistantContentMayBeNull) {
  const ParsedRequest p = ParseOk(
      Endpoint::kChatCompletions,
      {{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", nullptr}},
                     {{"role", "assistant"}}, {{"role", "user"}, {"content", "again"}}}}});
  ASSERT_EQ(p.request.chat().messages_size(), 4);
  EXPECT_TRUE(p.request.chat().messages(1).content_null());
  EXPECT_EQ(p.request.chat().messages(1).content(), "");
  EXPECT_TRUE(p.request.chat().messages(2).content_null());
  EXPECT_FALSE(p.request.chat().messages(0).content_null());
  // A user's content is still required.
  EXPECT_EQ(ParseFails(Endpoint::kChatCompletions, R"({"messages": [{"role": "user", "content": null}]})").param,
            "messages[0].content");
}

TEST(OpenAiRequest, CompletionsExtrasAndN) {
  const ParsedRequest batch =
      ParseOk(Endpoint::kCompletions, {{"prompt", {"a", "b", json({1, 2})}}, {"n", 2}, {"echo", true}});
  ASSERT_EQ(batch.prompts.size(), 3u);
  EXPECT_EQ(batch.prompts[1].text(), "b");
  EXPECT_EQ(batch.prompts[2].token_ids().ids_size(), 2);
  EXPECT_EQ(batch.n, 2);
  EXPECT_EQ(batch.request.n(), 2);
  EXPECT_TRUE(batch.echo);
  // A list of one prompt is that prompt.
  const ParsedRequest one = ParseOk(Endpoint::kCompletions, {{"prompt", {"only"}}});
  EXPECT_TRUE(one.prompts.empty());
  EXPECT_EQ(one.request.text(), "only");
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, {{"prompt", ""}}).request.text(), "");
  const ParsedRequest zero = ParseOk(Endpoint::kCompletions, {{"prompt", "x"}, {"max_tokens", 0}, {"echo", true}});
  EXPECT_TRUE(zero.max_tokens_zero);
  // Chat keeps max_tokens >= 1.
  EXPECT_EQ(ParseFails(Endpoint::kChatCompletions,
                       R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})")
                .param,
            "max_tokens");
  const ApiError suffix = ParseFails(Endpoint::kCompletions, R"({"prompt": "x", "suffix": "y"})");
  EXPECT_EQ(suffix.param, "suffix");
  EXPECT_NE(suffix.message.find("FIM"), std::string::npos) << suffix.message;
}

}  // namespace
}  // namespace specline::openai

namespace specline::openai {
namespace {

TEST(OpenAiCors, OriginsAreMatchedExactly) {
  EXPECT_FALSE(CorsPolicy().enabled());
  EXPECT_FALSE(CorsPolicy().AllowOrigin("https://a.example").has_value());
  const CorsPolicy list = CorsPolicy::Parse("https://a.example, http://localhost:3000").value();
  EXPECT_TRUE(list.enabled());
  EXPECT_EQ(list.AllowOrigin("https://a.example").value_or(""), "https://a.example");
  EXPECT_EQ(list.AllowOrigin("http://localhost:3000").value_or(""), "http://localhost:3000");
  EXPECT_FALSE(list.AllowOrigin("https://evil.example").has_value());
  EXPECT_FALSE(list.AllowOrigin("").has_value());
  EXPECT_EQ(CorsPolicy::Parse("*").value().AllowOrigin("https://any.example").value_or(""), "*");
  EXPECT_FALSE(CorsPolicy::Parse("https://a.example/path").ok());
  EXPECT_FALSE(CorsPolicy::Parse("a.example").ok());
}

TEST(OpenAiResponses, InputAndInstructionsBecomeChat) {
  ParsedRequest p;
  ASSERT_FALSE(ParseResponsesRequest(
      R"({"model": "m", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 7,
          "temperature": 0, "store": false, "metadata": {"a": "b"}})",
      &p));
  ASSERT_EQ(p.request.chat().messages_size(), 2);
  EXPECT_EQ(p.request.chat().messages(0).role(), "system");
  EXPECT_EQ(p.request.chat().messages(1).content(), "Hi");
  EXPECT_EQ(p.request.max_tokens(), 7);
  ParsedRequest list;
  ASSERT_FALSE(ParseResponsesRequest(
      R"({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}]},
                    {"type": "message", "role": "assistant", "content": "b"}]})",
      &list));
  EXPECT_EQ(list.request.chat().messages_size(), 2);
  ParsedRequest bad;
  auto e = ParseResponsesRequest(R"({"input": "x", "max_output_tokens": 0})", &bad);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "max_output_tokens");
  e = ParseResponsesRequest(R"({"input": [{"type": "input_image", "role": "user"}]})", &bad);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "input[0].type");
  e = ParseResponsesRequest(R"({"input": "x", "previous_response_id": "resp_1"})", &bad);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "previous_response_id");
  EXPECT_TRUE(ParseResponsesRequest(R"({"instructions": "x"})", &bad));
}

TEST(OpenAiResponses, StreamedEventsInOrder) {
  ParsedRequest p;
  ASSERT_FALSE(ParseResponsesRequest(R"({"input": "Hi", "stream": true})", &p));
  ResponsesRender r({Endpoint::kResponses, "resp_abc", 1700000000, "m", "fp"}, p);
  v1::Usage usage;
  usage.set_prompt_tokens(4);
  usage.set_completion_tokens(2);
  std::string all = r.Opening();
  all += r.Delta("He");
  all += r.Delta("llo");
  all += r.Closing(v1::FINISH_REASON_STOP, usage);
  std::vector<std::string> types;
  std::vector<json> data;
  for (size_t pos = 0; pos < all.size();) {
    const size_t end = all.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    const std::string ev = all.substr(pos, end - pos);
    const size_t nl = ev.find('\n');
    ASSERT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    types.push_back(ev.substr(7, nl - 7));
    data.push_back(json::parse(ev.substr(nl + 7)));
    EXPECT_EQ(data.back()["type"], types.back());
    EXPECT_EQ(data.back()["sequence_number"], static_cast<int>(data.size()) - 1);
    pos = end + 2;
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.created", "response.output_item.added", "response.content_part.added",
                       "response.output_text.delta", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done",
                       "response.output_item.done", "response.completed"}));
  EXPECT_EQ(data[5]["text"], "Hello");
  const json& done = data.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "Hello");
  EXPECT_EQ(done["usage"]["input_tokens"], 4);
  EXPECT_EQ(done["usage"]["output_tokens"], 2);
  const json whole = json::parse(r.Whole("Hello", v1::FINISH_REASON_LENGTH, usage));
  EXPECT_EQ(whole["object"], "response");
  EXPECT_EQ(whole["output_text"], "Hello");
  EXPECT_EQ(whole["status"], "incomplete");
  EXPECT_EQ(whole["incomplete_details"]["reason"], "max_output_tokens");
}

}  // namespace
}  // namespace specline::openai
