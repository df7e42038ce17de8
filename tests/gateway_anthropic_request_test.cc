// Anthropic's Messages request as the OpenAI chat body the shared pipeline
// parses (services/anthropic/messages_request.h); each translated body is
// then run through the OpenAI chat parser itself.
#include "services/anthropic/anthropic_errors.h"
#include "services/anthropic/messages_request.h"
#include "services/anthropic/messages_response.h"

#include <gtest/gtest.h>

#include "services/openai/openai_request.h"

namespace specline::anthropic {
namespace {

using json = nlohmann::json;

MessagesRequest Parse(const json& body) {
  MessagesRequest r;
  std::optional<openai::ApiError> e = ParseMessagesRequest(body.dump(), &r);
  EXPECT_FALSE(e) << (e ? e->message : "");
  openai::ParsedRequest parsed;
  std::optional<openai::ApiError> chat_error =
      openai::ParseRequest(openai::Endpoint::kChatCompletions, r.chat.dump(), &parsed);
  EXPECT_FALSE(chat_error) << (chat_error ? chat_error->message : "") << "\n" << r.chat.dump(1);
  return r;
}

std::string Refusal(const json& body) {
  MessagesRequest r;
  std::optional<openai::ApiError> e = ParseMessagesRequest(body.dump(), &r);
  EXPECT_TRUE(e) << body.dump();
  if (!e) return "";
  EXPECT_EQ(e->http_status, 400);
  const json error = json::parse(ErrorBody(*e));
  EXPECT_EQ(error["type"], "error");
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  return e->message;
}

json Base() {
  return {{"model", "m"}, {"max_tokens", 16}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
}

TEST(AnthropicMessages, TextTurnsSystemAndSamplingBecomeTheChatBody) {
  json body = Base();
  body["system"] = json::array({{{"type", "text"}, {"text", "Be brief."}}});
  body["messages"] = {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi"}}}}},
                      {{"role", "assistant"}, {"content", "Hello."}},
                      {{"role", "system"}, {"content", "Now in French."}},
                      {{"role", "user"}, {"content", "Again"}}};
  body["temperature"] = 0.5;
  body["top_k"] = 40;
  body["stop_sequences"] = {"\n\n"};
  body["metadata"] = {{"user_id", "u1"}};
  body["stream"] = true;
  const MessagesRequest r = Parse(body);
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.stream);
  EXPECT_FALSE(r.prefill);
  const json& m = r.chat["messages"];
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0], (json{{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[1], (json{{"role", "user"}, {"content", "Hi"}}));
  EXPECT_EQ(m[2], (json{{"role", "assistant"}, {"content", "Hello."}}));
  EXPECT_EQ(m[3], (json{{"role", "system"}, {"content", "Now in French."}}));
  EXPECT_EQ(r.chat["max_tokens"], 16);
  EXPECT_EQ(r.chat["top_k"], 40);
  EXPECT_EQ(r.chat["stop"], json({"\n\n"}));
  EXPECT_EQ(r.chat["user"], "u1");
  EXPECT_EQ(r.chat["stream_options"]["include_usage"], true);
}

TEST(AnthropicMessages, ToolUseAndToolResultBecomeToolCallsAndToolMessages) {
  json body = Base();
  body["tools"] = {{{"name", "get_weather"},
                    {"description", "Weather of a city"},
                    {"input_schema", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}};
  body["tool_choice"] = {{"type", "any"}, {"disable_parallel_tool_use", true}};
  body["messages"] = {
      {{"role", "user"}, {"content", "Weather in Paris?"}},
      {{"role", "assistant"},
       {"content", {{{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}}}},
      {{"role", "user"},
       {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "18 C"}},
                    {{"type", "text"}, {"text", "And tomorrow?"}}}}}};
  const MessagesRequest r = Parse(body);
  const json& m = r.chat["messages"];
  ASSERT_EQ(m.size(), 4u);
  EXPECT_TRUE(m[1]["content"].is_null());
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[1]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(m[1]["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            (json{{"city", "Paris"}}));
  EXPECT_EQ(m[2], (json{{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "18 C"}}));
  EXPECT_EQ(m[3], (json{{"role", "user"}, {"content", "And tomorrow?"}}));
  EXPECT_EQ(r.chat["tools"][0]["function"]["parameters"]["properties"]["city"]["type"], "string");
  EXPECT_EQ(r.chat["tool_choice"], "required");
  EXPECT_EQ(r.chat["parallel_tool_calls"], false);
  body["tool_choice"] = {{"type", "tool"}, {"name", "get_weather"}};
  EXPECT_EQ(Parse(body).chat["tool_choice"]["function"]["name"], "get_weather");
  body["tool_choice"] = {{"type", "none"}};
  EXPECT_EQ(Parse(body).chat["tool_choice"], "none");
}

TEST(AnthropicMessages, AFinalAssistantTurnIsContinued) {
  json body = Base();
  body["messages"].push_back({{"role", "assistant"}, {"content", "The answer is"}});
  const MessagesRequest r = Parse(body);
  EXPECT_TRUE(r.prefill);
  EXPECT_EQ(r.chat["continue_final_message"], true);
  EXPECT_EQ(r.chat["add_generation_prompt"], false);
}

TEST(AnthropicMessages, RefusalsNameTheirField) {
  json body = Base();
  body.erase("max_tokens");
  EXPECT_NE(Refusal(body).find("max_tokens"), std::string::npos);
  body = Base();
  body["messages"][0]["content"] = {{{"type", "image"}, {"source", {}}}};
  EXPECT_NE(Refusal(body).find("messages[0].content[0]"), std::string::npos);
  body = Base();
  body["thinking"] = "on";
  EXPECT_NE(Refusal(body).find("thinking"), std::string::npos);
  body = Base();
  body["stream"] = "yes";
  EXPECT_NE(Refusal(body).find("stream"), std::string::npos);
  body = Base();
  body["messages"][0]["content"] = {{{"type", 7}}};  // a wrong JSON type deep in a block
  EXPECT_FALSE(Refusal(body).empty());
  body = Base();
  body["messages"][0]["role"] = "tool";
  EXPECT_NE(Refusal(body).find("messages[0].role"), std::string::npos);
  body = Base();
  body["tool_choice"] = {{"type", "sometimes"}};
  EXPECT_NE(Refusal(body).find("tool_choice.type"), std::string::npos);
  EXPECT_NE(Refusal(json::array()).find("body"), std::string::npos);
}

// count_tokens takes the same body without max_tokens; thinking is
// accepted (Claude Code asks for it) and changes nothing.
TEST(AnthropicMessages, CountTokensNeedsNoMaxTokensAndThinkingIsAccepted) {
  json body = Base();
  body.erase("max_tokens");
  body["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  MessagesRequest r;
  EXPECT_FALSE(ParseMessagesRequest(body.dump(), &r, /*count_only=*/true));
  EXPECT_FALSE(r.chat.contains("max_tokens"));
}

TEST(AnthropicMessages, ErrorTypesFollowTheStatus) {
  const auto type = [](int status) {
    openai::ApiError e;
    e.http_status = status;
    e.message = "m";
    const json body = json::parse(ErrorBody(e));
    EXPECT_EQ(body["type"], "error");
    EXPECT_EQ(body["error"]["message"], "m");
    return body["error"]["type"].get<std::string>();
  };
  EXPECT_EQ(type(400), "invalid_request_error");
  EXPECT_EQ(type(401), "authentication_error");
  EXPECT_EQ(type(404), "not_found_error");
  EXPECT_EQ(type(429), "rate_limit_error");
  EXPECT_EQ(type(503), "overloaded_error");
  EXPECT_EQ(type(500), "api_error");
}

// The data of each "event: NAME\ndata: JSON\n\n" in order, the name
// checked against the data's type.
std::vector<json> Events(const std::string& sse) {
  std::vector<json> out;
  size_t at = 0;
  while ((at = sse.find("event: ", at)) != std::string::npos) {
    const size_t name_end = sse.find('\n', at);
    const std::string name = sse.substr(at + 7, name_end - at - 7);
    const size_t data_end = sse.find("\n\n", name_end);
    out.push_back(json::parse(sse.substr(name_end + 7, data_end - name_end - 7)));
    EXPECT_EQ(out.back()["type"], name);
    at = data_end;
  }
  return out;
}

TEST(AnthropicMessages, StreamedEventsOpenAndCloseABlockPerKind) {
  MessageEvents events("msg_1", "m");
  v1::Usage prompt;
  prompt.set_prompt_tokens(10);
  prompt.set_cached_tokens(4);
  prompt.set_completion_tokens(3);
  // One call at a time: the events depend on the order.
  std::string sse = events.Start(prompt);
  sse += events.Text("Hel");
  sse += events.Text("lo");
  sse += events.ToolUse("call_1", "get_weather");
  sse += events.InputJson("{\"city\": ");
  sse += events.InputJson("\"Paris\"}");
  StopReason stop;
  stop.finish = v1::FINISH_REASON_STOP;
  stop.made_calls = true;
  v1::Usage usage = prompt;
  usage.set_completion_tokens(9);
  sse += events.Finish(stop, usage);
  const std::vector<json> e = Events(sse);
  std::vector<std::string> types;
  for (const json& j : e) types.push_back(j["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"message_start", "ping", "content_block_start",
                                             "content_block_delta", "content_block_delta",
                                             "content_block_stop", "content_block_start",
                                             "content_block_delta", "content_block_delta",
                                             "content_block_stop", "message_delta", "message_stop"}));
  // input_tokens leave out the cached ones, as Anthropic counts them.
  EXPECT_EQ(e[0]["message"]["usage"]["input_tokens"], 6);
  EXPECT_EQ(e[0]["message"]["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(e[0]["message"]["usage"]["output_tokens"], 0);
  EXPECT_EQ(e[2]["index"], 0);
  EXPECT_EQ(e[3]["delta"]["text"], "Hel");
  EXPECT_EQ(e[6]["index"], 1);
  EXPECT_EQ(e[6]["content_block"]["name"], "get_weather");
  EXPECT_EQ(json::parse(e[7]["delta"]["partial_json"].get<std::string>() +
                        e[8]["delta"]["partial_json"].get<std::string>()),
            json({{"city", "Paris"}}));
  EXPECT_EQ(e[10]["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(e[10]["usage"]["output_tokens"], 9);
}

TEST(AnthropicMessages, WholeMessageAndStopReasons) {
  tool_calls::ParsedText answer;
  answer.content = "\n";
  answer.calls.push_back({"call_1", "get_weather", R"({"city":"Paris"})"});
  StopReason stop;
  stop.finish = v1::FINISH_REASON_STOP;
  stop.made_calls = true;
  const json m = json::parse(WholeMessage("msg_1", "m", answer, stop, v1::Usage()));
  EXPECT_EQ(m["type"], "message");
  ASSERT_EQ(m["content"].size(), 1u);  // whitespace around calls is not a text block
  EXPECT_EQ(m["content"][0]["input"]["city"], "Paris");
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["stop_sequence"], nullptr);
  StopReason by_string;
  by_string.finish = v1::FINISH_REASON_STOP;
  by_string.stop_string = "END";
  EXPECT_STREQ(by_string.Name(), "stop_sequence");
  StopReason by_length;
  by_length.finish = v1::FINISH_REASON_LENGTH;
  EXPECT_STREQ(by_length.Name(), "max_tokens");
  StopReason plain;
  plain.finish = v1::FINISH_REASON_STOP;
  EXPECT_STREQ(plain.Name(), "end_turn");
}

}  // namespace
}  // namespace specline::anthropic
