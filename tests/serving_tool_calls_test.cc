// Tool calls over the OpenAI HTTP API of a real deployment on loopback:
// SmolLM2 served with the Qwen2.5 chat template (--chat-template), whose
// tools and tool messages /apply-template renders, and whose answers come
// back through the Hermes call parser in OpenAI's shapes, streamed and not.
// (The 135M model seldom calls a tool by itself: the call shapes are
// checked on parsed text in gateway_tool_calls_test; here the path is.)
#include "tests/http_test_client.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

using nlohmann::json;

std::string QwenTemplate() {
  return SourcePath("tests/data/jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja");
}

class ToolCallServing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_FALSE(SmolLm2Path().empty()) << "SmolLM2 is fetched by scripts/setup.sh";
    stack_ = StartStack(SmolLm2Path(), 1, {"--chat-template", QwenTemplate()}).release();
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  static int Http() { return stack_->ports["gateway"]["http"].get<int>(); }
  static ServingStack* stack_;
};
ServingStack* ToolCallServing::stack_ = nullptr;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");

const json kConversation = json::parse(R"([
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
  {"role": "tool", "tool_call_id": "call_1", "content": "22 C and sunny"}])");

TEST_F(ToolCallServing, ApplyTemplateRendersToolsAndToolMessages) {
  HttpResult r = PostJson(Http(), "/apply-template", {{"messages", kConversation}, {"tools", kTools}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string prompt = r.Json()["prompt"];
  for (const char* want :
       {"<tools>\n{\"", "\"name\": \"get_weather\"", "\"description\": \"Weather in a city\"",
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>",
        "<tool_response>\n22 C and sunny\n</tool_response>"}) {
    EXPECT_NE(prompt.find(want), std::string::npos) << want << "\n---\n" << prompt;
  }
  // tool_choice "none" renders the tools too (vLLM's default).
  r = PostJson(Http(), "/apply-template",
               {{"messages", kConversation}, {"tools", kTools}, {"tool_choice", "none"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.Json()["prompt"].get<std::string>().find("<tools>"), std::string::npos);
}

// What OpenAI's SDK reads of an answer to a request with tools: content
// text or tool calls, and the matching finish reason.
void ExpectAssistantMessage(const json& choice) {
  const json& message = choice["message"];
  EXPECT_EQ(message["role"], "assistant");
  const std::string finish = choice["finish_reason"];
  if (message.contains("tool_calls")) {
    EXPECT_EQ(finish, "tool_calls");
    for (const json& call : message["tool_calls"]) {
      EXPECT_EQ(call["type"], "function");
      EXPECT_EQ(call["function"]["name"], "get_weather");
      EXPECT_TRUE(json::parse(call["function"]["arguments"].get<std::string>()).is_object());
    }
  } else {
    EXPECT_TRUE(message["content"].is_string()) << message;
    EXPECT_TRUE(finish == "stop" || finish == "length") << finish;
  }
}

TEST_F(ToolCallServing, ChatWithToolsAnswersInOpenAisShape) {
  for (const json& choice : {json("auto"), json("required"),
                             json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
    const json body = {{"messages", json::array({kConversation[0]})}, {"tools", kTools},
                       {"tool_choice", choice}, {"max_tokens", 24}, {"temperature", 0}};
    HttpResult r = PostJson(Http(), "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_TRUE(r.Json().contains("choices")) << r.body;
    ExpectAssistantMessage(r.Json()["choices"][0]);

    // Streamed: the same answer, as deltas.
    json streamed_body = body;
    streamed_body["stream"] = true;
    HttpResult s = PostJson(Http(), "/v1/chat/completions", streamed_body);
    ASSERT_EQ(s.status, 200) << s.body;
    SseEvents events = ParseSse(s.body);
    ASSERT_TRUE(events.error.empty()) << events.error;
    ASSERT_GE(events.data.size(), 2u);
    EXPECT_EQ(events.data.back(), "[DONE]");
    std::string content;
    json finish;
    for (size_t i = 0; i + 1 < events.data.size(); ++i) {
      const json c = json::parse(events.data[i]);
      ASSERT_TRUE(c.contains("choices")) << events.data[i];
      const json& delta = c["choices"][0]["delta"];
      if (delta.contains("content")) content += delta["content"].get<std::string>();
      if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
    }
    const json whole = r.Json()["choices"][0];
    EXPECT_EQ(finish, whole["finish_reason"]);
    if (whole["message"]["content"].is_string()) {
      EXPECT_EQ(content, whole["message"]["content"]);
    }
  }
}

TEST_F(ToolCallServing, BadToolRequestsAre400sNamingTheField) {
  const json messages = json::array({kConversation[0]});
  HttpResult r = PostJson(Http(), "/v1/chat/completions",
                          {{"messages", messages}, {"tools", kTools},
                           {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Json()["error"]["param"], "tool_choice") << r.body;
  r = PostJson(Http(), "/v1/chat/completions",
               {{"messages", messages}, {"tools", {{{"type", "retrieval"}}}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.Json()["error"]["param"], "tools[0].type") << r.body;
}

}  // namespace
}  // namespace specline::testing
