// Anthropic's Messages request as the OpenAI chat body the shared pipeline
// parses (services/anthropic/messages_request.h); each translated body is
// then run through the OpenAI chat parser itself.
#include "services/anthropic/messages_request.h"

#include <gtest/gtest.h>

#include "services/openai/openai_request.h"

namespace specline::anthropic {
namespace {

using json = nlohmann::json;

MessagesRequest Parse(const json& body) {
  MessagesRequest r;
  std::optional<MessagesError> e = ParseMessagesRequest(body.dump(), &r);
  EXPECT_FALSE(e) << (e ? e->message : "");
  openai::ParsedRequest parsed;
  std::optional<openai::ApiError> chat_error =
      openai::ParseRequest(openai::Endpoint::kChatCompletions, r.chat.dump(), &parsed);
  EXPECT_FALSE(chat_error) << (chat_error ? chat_error->message : "") << "\n" << r.chat.dump(1);
  return r;
}

std::string Refusal(const json& body) {
  MessagesRequest r;
  std::optional<MessagesError> e = ParseMessagesRequest(body.dump(), &r);
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
  body["thinking"] = {{"type", "enabled"}};
  EXPECT_NE(Refusal(body).find("thinking"), std::string::npos);
  body = Base();
  body["messages"][0]["role"] = "tool";
  EXPECT_NE(Refusal(body).find("messages[0].role"), std::string::npos);
  body = Base();
  body["tool_choice"] = {{"type", "sometimes"}};
  EXPECT_NE(Refusal(body).find("tool_choice.type"), std::string::npos);
  EXPECT_NE(Refusal(json::array()).find("body"), std::string::npos);
}

}  // namespace
}  // namespace specline::anthropic
