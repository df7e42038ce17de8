// The OpenAI request bodies into GenerateRequest, and the response bodies
// out of GenerateResponse (services/openai/): every field honoured or
// refused by name, OpenAI's shapes on the way out.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/openai/openai_request.h"
#include "services/openai/cors.h"
#include "services/openai/openai_response.h"
#include "services/openai/responses_api.h"
#include "services/openai/tool_call_response.h"

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

// The Responses API's function tools and tool round trip, as the chat
// request the gateway serves: flat tools to chat's (in the client's key
// order), tool_choice's named form, function_call items to an assistant's
// tool_calls, function_call_output items to tool messages.
TEST(OpenAiResponses, FunctionToolsMapOntoChat) {
  ParsedRequest p;
  ASSERT_FALSE(ParseResponsesRequest(
      R"({"input": [{"role": "user", "content": "Weather in Paris?"},
                    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
                     "arguments": "{\"city\": \"Paris\"}", "status": "completed"},
                    {"type": "function_call", "call_id": "call_2", "name": "now", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "22 C"},
                    {"type": "function_call_output", "call_id": "call_2",
                     "output": [{"type": "input_text", "text": "noon"}]}],
          "tools": [{"type": "function", "name": "get_weather", "description": "Weather",
                     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                     "strict": true},
                    {"type": "function", "name": "now", "parameters": {"type": "object"}}],
          "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": false,
          "store": false})",
      &p));
  EXPECT_EQ(p.request.chat().tools_json(),
            R"([{"type":"function","function":{"name":"get_weather","description":"Weather",)"
            R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}},)"
            R"({"type":"function","function":{"name":"now","parameters":{"type":"object"}}}])");
  EXPECT_EQ(p.tools.choice, ToolRequest::Choice::kFunction);
  EXPECT_EQ(p.tools.function, "get_weather");
  EXPECT_FALSE(p.tools.parallel_tool_calls);
  const auto& m = p.request.chat().messages();
  ASSERT_EQ(m.size(), 4);
  EXPECT_EQ(m[1].role(), "assistant");
  EXPECT_TRUE(m[1].content_null());
  const json calls = json::parse(m[1].tool_calls_json());
  ASSERT_EQ(calls.size(), 2u);  // the two calls of one turn
  EXPECT_EQ(calls[0], json::parse(R"({"id": "call_1", "type": "function", "function":
                                      {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}})"));
  EXPECT_EQ(calls[1]["id"], "call_2");
  EXPECT_EQ(m[2].role(), "tool");
  EXPECT_EQ(m[2].tool_call_id(), "call_1");
  EXPECT_EQ(m[2].content(), "22 C");
  EXPECT_EQ(m[3].content(), "noon");
  ParsedRequest text;
  ASSERT_FALSE(ParseResponsesRequest(R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": "required"})", &text));
  EXPECT_EQ(text.tools.choice, ToolRequest::Choice::kRequired);

  // Each refusal names the Responses API's field.
  const std::pair<const char*, const char*> bad[] = {
      {R"({"input": "x", "tools": [{"type": "web_search"}]})", "tools[0].type"},
      {R"({"input": "x", "tools": [{"type": "function", "function": {"name": "f"}}]})", "tools[0].function"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "has space"}]})", "tools[0].name"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": 3}]})", "tools[0].parameters"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "file_search"}})",
       "tool_choice"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}})",
       "tool_choice"},
      {R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})", "input[0].call_id"},
      {R"({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]})",
       "input[0].arguments"},
      {R"({"input": [{"type": "function_call_output", "call_id": "c", "output": 3}]})", "input[0].output"},
      {R"({"input": [{"type": "item_reference", "id": "fc_1"}]})", "input[0].type"},
      {R"({"input": "x", "previous_response_id": "resp_1"})", "previous_response_id"},
  };
  for (const auto& [body, param] : bad) {
    ParsedRequest q;
    const std::optional<ApiError> e = ParseResponsesRequest(body, &q);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->param, param) << e->message;
    EXPECT_EQ(e->message.rfind(param, 0), 0u) << e->message;
  }
  ParsedRequest q;
  EXPECT_NE(ParseResponsesRequest(R"({"input": "x", "previous_response_id": "resp_1"})", &q)
                ->message.find("stored"),
            std::string::npos);
}

// Events as "type" + data, checking the framing on the way.
std::vector<std::pair<std::string, json>> SplitEvents(const std::string& all) {
  std::vector<std::pair<std::string, json>> out;
  for (size_t pos = 0; pos < all.size();) {
    const size_t end = all.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string ev = all.substr(pos, end - pos);
    const size_t nl = ev.find('\n');
    out.emplace_back(ev.substr(7, nl - 7), json::parse(ev.substr(nl + 7)));
    EXPECT_EQ(out.back().second["type"], out.back().first);
    EXPECT_EQ(out.back().second["sequence_number"], static_cast<int>(out.size()) - 1);
    pos = end + 2;
  }
  return out;
}

// A call's answer as function_call items: whole, and streamed in token-sized
// pieces with the arguments as OpenAI streams them (item added with
// arguments "", several argument deltas, .done with the whole arguments,
// item done), the text before it a message item of its own.
TEST(OpenAiResponses, CallsAreFunctionCallItems) {
  ParsedRequest p;
  ASSERT_FALSE(ParseResponsesRequest(
      R"({"input": "Weather?", "stream": true, "tools": [{"type": "function", "name": "get_weather"}]})", &p));
  const ResponseIdentity who{Endpoint::kResponses, "resp_abc", 1700000000, "m", "fp"};
  const std::string answer =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"unit\": \"celsius\"}}\n</tool_call>";
  const tool_calls::ParsedText whole = tool_calls::ParseAll(tool_calls::Syntax::kHermes, answer);
  v1::Usage usage;
  usage.set_completion_tokens(30);
  ResponsesRender r(who, p);
  json o = json::parse(r.Whole(whole, v1::FINISH_REASON_STOP, usage));
  EXPECT_EQ(o["status"], "completed");
  EXPECT_EQ(o["store"], false);
  EXPECT_EQ(o["tools"][0]["name"], "get_weather");
  EXPECT_EQ(o["tool_choice"], "auto");
  ASSERT_EQ(o["output"].size(), 2u);
  EXPECT_EQ(o["output"][0]["type"], "message");
  EXPECT_EQ(o["output_text"], "Checking.\n");
  const json& item = o["output"][1];
  EXPECT_EQ(item["type"], "function_call");
  EXPECT_EQ(item["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(item["call_id"], whole.calls[0].id);
  EXPECT_EQ(item["name"], "get_weather");
  EXPECT_EQ(item["arguments"], R"({"city": "Paris", "unit": "celsius"})");
  EXPECT_EQ(item["status"], "completed");
  tool_calls::ParsedText only_call = whole;
  only_call.content = "\n";
  o = json::parse(r.Whole(only_call, v1::FINISH_REASON_STOP, usage));
  ASSERT_EQ(o["output"].size(), 1u);  // no message for the syntax's whitespace
  EXPECT_EQ(o["output"][0]["type"], "function_call");

  const tool_calls::ToolCallSupport support{tool_calls::Syntax::kHermes, true, false, "", {}};
  ToolCallResponder responder(tool_calls::Syntax::kHermes, support, nullptr);
  std::string all = r.Opening();
  for (size_t at = 0; at < answer.size(); at += 2) {
    v1::GenerateResponse message;
    message.set_text(answer.substr(at, 2));
    if (at + 2 >= answer.size()) message.set_finish_reason(v1::FINISH_REASON_STOP);
    all += r.Parsed(responder.Next(message));
  }
  all += r.Closing(v1::FINISH_REASON_STOP, usage);
  std::vector<std::string> order;
  std::string text, arguments;
  int argument_deltas = 0;
  for (const auto& [type, data] : SplitEvents(all)) {
    if (type == "response.output_text.delta") text += data["delta"].get<std::string>();
    if (type == "response.function_call_arguments.delta") {
      EXPECT_EQ(data["output_index"], 1);
      arguments += data["delta"].get<std::string>();
      ++argument_deltas;
    }
    if (type == "response.output_item.added" && data["item"]["type"] == "function_call") {
      EXPECT_EQ(data["item"]["arguments"], "");
    }
    if (type == "response.function_call_arguments.done") {
      EXPECT_EQ(data["arguments"], arguments);
    }
    if (type == "response.completed") {
      EXPECT_EQ(data["response"]["output"][1]["arguments"], whole.calls[0].arguments);
      EXPECT_EQ(data["response"]["output"][1]["status"], "completed");
      EXPECT_EQ(data["response"]["output"][0]["content"][0]["text"], "Checking.\n");
    }
    if (order.empty() || order.back() != type) order.push_back(type);
  }
  EXPECT_EQ(order, (std::vector<std::string>{
                       "response.created", "response.output_item.added", "response.content_part.added",
                       "response.output_text.delta", "response.output_text.done",
                       "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta",
                       "response.function_call_arguments.done", "response.output_item.done",
                       "response.completed"}));
  EXPECT_EQ(text, "Checking.\n");
  EXPECT_EQ(arguments, whole.calls[0].arguments);
  EXPECT_GT(argument_deltas, 1);
}

}  // namespace
}  // namespace specline::openai
