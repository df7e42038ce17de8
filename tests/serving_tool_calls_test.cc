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

// SmolLM2 with its own chat template, which does not render tools: the
// generic tool form (services/tool_calls/generic_prompt.h), enforced by
// grammar. The same deployment serves the request items of issue 40 part 6
// that need a model of its own template: assistant prefill, the prompt-token
// count, and --accept-any-model.
class OwnTemplateServing : public ::testing::Test {
 public:
  static int Http() { return stack_->ports["gateway"]["http"].get<int>(); }

 protected:
  static void SetUpTestSuite() {
    ASSERT_FALSE(SmolLm2Path().empty()) << "SmolLM2 is fetched by scripts/setup.sh";
    stack_ = StartStack(SmolLm2Path(), 1, {"--accept-any-model", "true"}).release();
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  static ServingStack* stack_;
};
ServingStack* OwnTemplateServing::stack_ = nullptr;

const json kTwoTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                  "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone",
   "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET", "PST"]}},
                  "required": ["zone"]}}}])");

// A call's arguments against the tool's schema (the two schemas above:
// every required property present, no other, each of its type or enum).
void ExpectValidCall(const std::string& name, const std::string& arguments, const json& tools) {
  const json args = json::parse(arguments, nullptr, false);
  ASSERT_TRUE(args.is_object()) << arguments;
  const json* params = nullptr;
  for (const json& t : tools) {
    if (t["function"]["name"] == name) params = &t["function"]["parameters"];
  }
  ASSERT_NE(params, nullptr) << "'" << name << "' is not among the tools";
  for (const json& r : (*params)["required"]) EXPECT_TRUE(args.contains(r.get<std::string>())) << arguments;
  for (const auto& [key, value] : args.items()) {
    ASSERT_TRUE((*params)["properties"].contains(key)) << key << " in " << arguments;
    const json& p = (*params)["properties"][key];
    if (p.contains("enum")) {
      EXPECT_NE(std::find(p["enum"].begin(), p["enum"].end(), value), p["enum"].end()) << arguments;
    } else {
      EXPECT_TRUE(value.is_string()) << arguments;
    }
  }
}

struct StreamedAnswer {
  std::string content, finish;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  std::vector<int> argument_deltas;  // per call: the deltas that carried arguments
};

StreamedAnswer ReadStream(const HttpResult& s) {
  StreamedAnswer out;
  SseEvents events = ParseSse(s.body);
  EXPECT_TRUE(events.error.empty()) << events.error;
  if (events.data.empty() || events.data.back() != "[DONE]") {
    ADD_FAILURE() << "no [DONE]: " << s.body;
    return out;
  }
  for (size_t i = 0; i + 1 < events.data.size(); ++i) {
    const json c = json::parse(events.data[i]);
    if (c["choices"].empty()) continue;
    const json& choice = c["choices"][0];
    const json& delta = choice["delta"];
    if (delta.contains("content") && delta["content"].is_string()) out.content += delta["content"].get<std::string>();
    for (const json& call : delta.value("tool_calls", json::array())) {
      const size_t index = call["index"].get<size_t>();
      if (out.calls.size() <= index) {
        out.calls.resize(index + 1);
        out.argument_deltas.resize(index + 1);
      }
      const json& fn = call.value("function", json::object());
      if (fn.contains("name")) out.calls[index].first = fn["name"].get<std::string>();
      if (fn.contains("arguments") && !fn["arguments"].get<std::string>().empty()) {
        out.calls[index].second += fn["arguments"].get<std::string>();
        ++out.argument_deltas[index];
      }
    }
    if (!choice["finish_reason"].is_null()) out.finish = choice["finish_reason"].get<std::string>();
  }
  return out;
}

// The call(s) of one answer, streamed and not: the same calls, each a
// function among the tools with arguments its schema allows.
void ExpectCallsBothWays(json body, const std::string& want_name = "") {
  body["temperature"] = 0;
  body["max_tokens"] = 96;
  HttpResult r = PostJson(OwnTemplateServing::Http(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json reply = r.Json();
  const json& choice = reply["choices"][0];
  ASSERT_TRUE(choice["message"].contains("tool_calls")) << r.body;
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.body;
  EXPECT_TRUE(choice["message"]["content"].is_null()) << r.body;
  const json& calls = choice["message"]["tool_calls"];
  ASSERT_GE(calls.size(), 1u);
  for (const json& call : calls) {
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
    ExpectValidCall(call["function"]["name"], call["function"]["arguments"], body["tools"]);
    if (!want_name.empty()) {
      EXPECT_EQ(call["function"]["name"], want_name);
    }
  }
  body["stream"] = true;
  const StreamedAnswer s = ReadStream(PostJson(OwnTemplateServing::Http(), "/v1/chat/completions", body));
  EXPECT_EQ(s.finish, "tool_calls");
  EXPECT_TRUE(s.content.empty()) << s.content;
  ASSERT_EQ(s.calls.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(s.calls[i].first, calls[i]["function"]["name"]);
    EXPECT_EQ(json::parse(s.calls[i].second), json::parse(calls[i]["function"]["arguments"].get<std::string>()));
    // The arguments stream as they are generated (one token a message).
    EXPECT_GT(s.argument_deltas[i], 1) << s.calls[i].second;
  }
}

json WeatherQuestion() {
  return json::array({{{"role", "user"}, {"content", "What is the weather in Paris?"}}});
}

TEST_F(OwnTemplateServing, RequiredToolChoiceReturnsAValidCall) {
  ExpectCallsBothWays({{"messages", WeatherQuestion()}, {"tools", kTwoTools}, {"tool_choice", "required"}});
}

TEST_F(OwnTemplateServing, NamedFunctionIsTheOneCalled) {
  ExpectCallsBothWays({{"messages", WeatherQuestion()},
                       {"tools", kTwoTools},
                       {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}},
                      "get_time");
}

// "auto": text, or a valid call; streamed as not. A tool round trip's
// history (a past call, its result) renders as text the template takes.
TEST_F(OwnTemplateServing, AutoAnswersTextOrAValidCall) {
  json messages = WeatherQuestion();
  messages.push_back({{"role", "assistant"}, {"content", nullptr},
                      {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                                       {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}});
  messages.push_back({{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "22 C and sunny"}});
  for (const json& conversation : {WeatherQuestion(), messages}) {
    json body = {{"messages", conversation}, {"tools", kTwoTools}, {"temperature", 0}, {"max_tokens", 48}};
    HttpResult r = PostJson(Http(), "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json reply = r.Json();
    const json& choice = reply["choices"][0];
    body["stream"] = true;
    const StreamedAnswer s = ReadStream(PostJson(Http(), "/v1/chat/completions", body));
    EXPECT_EQ(s.finish, choice["finish_reason"]);
    SCOPED_TRACE(reply.dump());
    if (choice["message"].contains("tool_calls")) {
      for (const json& call : choice["message"]["tool_calls"])
        ExpectValidCall(call["function"]["name"], call["function"]["arguments"], kTwoTools);
      EXPECT_EQ(s.calls.size(), choice["message"]["tool_calls"].size());
    } else {
      ASSERT_TRUE(choice["message"]["content"].is_string()) << r.body;
      EXPECT_NE(choice["message"]["content"].get<std::string>().substr(0, 1), "{") << r.body;
      EXPECT_EQ(s.content, choice["message"]["content"]);
      EXPECT_TRUE(s.calls.empty());
    }
  }
  // The prompt: the tools and the reply shape in the system message, the
  // past call and its result as text.
  HttpResult t = PostJson(Http(), "/apply-template", {{"messages", messages}, {"tools", kTwoTools}});
  ASSERT_EQ(t.status, 200) << t.body;
  const std::string prompt = t.Json()["prompt"];
  for (const char* want : {"<|im_start|>system\nYou can call functions", "\"name\":\"get_time\"",
                           "{\"tool_calls\": [{\"name\": \"<function name>\"",
                           "<|im_start|>assistant\n{\"tool_calls\":[{\"arguments\":{\"city\":\"Paris\"},\"name\":\"get_weather\"}]}",
                           "<|im_start|>user\n{\"tool_response\":"}) {
    EXPECT_NE(prompt.find(want), std::string::npos) << want << "\n---\n" << prompt;
  }
}

// A conversation that ends with the assistant's turn continues it
// (llama-server's assistant prefill): the prompt stops inside that turn, and
// the greedy answer is what /v1/completions gives on the same prompt tokens.
TEST_F(OwnTemplateServing, AFinalAssistantTurnIsContinued) {
  const json messages = {{{"role", "user"}, {"content", "Tell me a story about a cat."}},
                         {{"role", "assistant"}, {"content", "Once upon a time, a cat named"}}};
  const json body = {{"messages", messages}, {"temperature", 0}, {"max_tokens", 12}};
  HttpResult t = PostJson(Http(), "/apply-template", body);
  ASSERT_EQ(t.status, 200) << t.body;
  const std::string prompt = t.Json()["prompt"];
  EXPECT_TRUE(prompt.ends_with("<|im_start|>assistant\nOnce upon a time, a cat named")) << prompt;
  HttpResult rendered = PostJson(Http(), "/v1/chat/completions/render", body);
  ASSERT_EQ(rendered.status, 200) << rendered.body;
  HttpResult chat = PostJson(Http(), "/v1/chat/completions", body);
  ASSERT_EQ(chat.status, 200) << chat.body;
  HttpResult completion = PostJson(Http(), "/v1/completions", {{"prompt", rendered.Json()["token_ids"]},
                                                              {"temperature", 0}, {"max_tokens", 12}});
  ASSERT_EQ(completion.status, 200) << completion.body;
  const std::string text = chat.Json()["choices"][0]["message"]["content"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text, completion.Json()["choices"][0]["text"]);
  // add_generation_prompt: true opens a new turn after it instead (vLLM's
  // default); continue_final_message: false too.
  for (const char* field : {"add_generation_prompt", "continue_final_message"}) {
    json fresh = body;
    fresh[field] = std::string(field) == "add_generation_prompt";
    t = PostJson(Http(), "/apply-template", fresh);
    ASSERT_EQ(t.status, 200) << t.body;
    EXPECT_TRUE(t.Json()["prompt"].get<std::string>().ends_with("named<|im_end|>\n<|im_start|>assistant\n"))
        << field << ": " << t.body;
  }
  json both = body;
  both["add_generation_prompt"] = true;
  both["continue_final_message"] = true;
  HttpResult refused = PostJson(Http(), "/v1/chat/completions", both);
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.Json()["error"]["param"], "continue_final_message") << refused.body;
}

// llama-server's POST /chat/completions/input_tokens: the prompt tokens after
// the template, the same count /v1/chat/completions/render gives.
TEST_F(OwnTemplateServing, InputTokensCountTheRenderedPrompt) {
  const json body = {{"messages", WeatherQuestion()}, {"tools", kTwoTools}};
  HttpResult rendered = PostJson(Http(), "/v1/chat/completions/render", body);
  ASSERT_EQ(rendered.status, 200) << rendered.body;
  const size_t n = rendered.Json()["token_ids"].size();
  EXPECT_GT(n, 100u);  // the tools are in the prompt
  for (const char* path : {"/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"}) {
    HttpResult r = PostJson(Http(), path, body);
    ASSERT_EQ(r.status, 200) << path << ": " << r.body;
    EXPECT_EQ(r.Json(), json({{"input_tokens", n}})) << path;
  }
  HttpResult responses = PostJson(Http(), "/v1/responses/input_tokens", {{"input", "Hi"}});
  ASSERT_EQ(responses.status, 200) << responses.body;
  EXPECT_EQ(responses.Json()["object"], "response.input_tokens");
  EXPECT_GT(responses.Json()["input_tokens"].get<int>(), 1);
  HttpResult bad = PostJson(Http(), "/v1/chat/completions/input_tokens", {{"messages", "Hi"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.Json()["error"]["param"], "messages") << bad.body;
}

// --accept-any-model: a request naming another model is served by this one
// (off by default: serving_openai_conformance_test's 404); the model list
// and /v1/models/{id} still name the served model only.
TEST_F(OwnTemplateServing, AcceptAnyModelAnswersAnyName) {
  HttpResult r = PostJson(Http(), "/v1/chat/completions",
                          {{"model", "gpt-3.5-turbo"}, {"messages", WeatherQuestion()}, {"max_tokens", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.Json()["model"], "gpt-3.5-turbo");
  HttpResult m = HttpCall(Http(), "GET", "/v1/models/gpt-3.5-turbo");
  EXPECT_EQ(m.status, 404);
  EXPECT_EQ(m.Json()["error"]["code"], "model_not_found") << m.body;
}

}  // namespace
}  // namespace specline::testing
