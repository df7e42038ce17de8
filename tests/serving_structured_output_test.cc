// Structured output through a real deployment on loopback (`specline serve`
// with the default model, SmolLM2-135M-Instruct): the request fields of
// OpenAI (response_format json_object / json_schema), vLLM (guided_*,
// structured_outputs) and llama-server (json_schema, grammar) constrain what
// comes back, streamed or not, on plain and speculative decoding; a bad
// schema or grammar is a 400 naming response_format, before any stream.
#include <regex>

#include "tests/http_test_client.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

using nlohmann::json;

class StructuredOutput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_FALSE(SmolLm2Path().empty()) << "run scripts/setup.sh (the default model)";
    stack_ = StartStack(SmolLm2Path(), 2).release();
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  static int Http() { return stack_->ports["gateway"]["http"].get<int>(); }

  static json Chat(const std::string& question, json extra) {
    json body = {{"messages", json::array({{{"role", "user"}, {"content", question}}})},
                 {"max_tokens", 160},
                 {"temperature", 0}};
    for (auto& [k, v] : extra.items()) body[k] = v;
    return body;
  }
  static ServingStack* stack_;
};
ServingStack* StructuredOutput::stack_ = nullptr;

const json kPersonSchema = {
    {"type", "object"},
    {"properties",
     {{"name", {{"type", "string"}, {"maxLength", 20}}},
      {"age", {{"type", "integer"}, {"minimum", 0}, {"maximum", 150}}},
      {"city", {{"enum", json::array({"Paris", "London", "Tokyo"})}}}}},
    {"required", json::array({"name", "age", "city"})},
    {"additionalProperties", false}};

void ExpectPerson(const std::string& content) {
  const json j = json::parse(content, nullptr, false);
  ASSERT_TRUE(j.is_object()) << content;
  ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << content;
  ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << content;
  EXPECT_GE(j["age"].get<int>(), 0);
  EXPECT_LE(j["age"].get<int>(), 150);
  ASSERT_TRUE(j.contains("city")) << content;
  EXPECT_TRUE(j["city"] == "Paris" || j["city"] == "London" || j["city"] == "Tokyo") << content;
  EXPECT_EQ(j.size(), 3u) << content;
}

TEST_F(StructuredOutput, OpenAiJsonSchemaOnEveryLosslessPolicy) {
  for (const char* policy : {"ar", "recycle"}) {
    HttpResult r = PostJson(
        Http(), "/v1/chat/completions",
        Chat("Describe a person who lives in a big city.",
             {{"policy", policy},
              {"response_format",
               {{"type", "json_schema"},
                {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", kPersonSchema}}}}}}));
    ASSERT_EQ(r.status, 200) << policy << ": " << r.body;
    const json body = r.Json();
    ExpectPerson(body["choices"][0]["message"]["content"].get<std::string>());
    EXPECT_EQ(body["choices"][0]["finish_reason"], "stop") << policy;
  }
}

// The same request on plain and speculative decoding gives the same text
// (greedy: lossless, grammar included), finished or cut by max_tokens
// (this small model can loop inside a free-form string).
TEST_F(StructuredOutput, SpeculationKeepsTheConstrainedGreedyText) {
  for (const char* question : {"Name three colours as JSON.", "Describe your house as JSON."}) {
    std::string texts[2], finish[2];
    int i = 0;
    for (const char* policy : {"ar", "recycle"}) {
      HttpResult r = PostJson(Http(), "/v1/chat/completions",
                              Chat(question, {{"policy", policy}, {"response_format", {{"type", "json_object"}}}}));
      ASSERT_EQ(r.status, 200) << r.body;
      texts[i] = r.Json()["choices"][0]["message"]["content"].get<std::string>();
      finish[i++] = r.Json()["choices"][0]["finish_reason"].get<std::string>();
    }
    EXPECT_EQ(texts[0], texts[1]);
    EXPECT_EQ(finish[0], finish[1]);
    if (finish[0] == "stop") EXPECT_TRUE(json::parse(texts[0], nullptr, false).is_object()) << texts[0];
    else EXPECT_EQ(texts[0].front(), '{') << texts[0];
  }
}

TEST_F(StructuredOutput, StreamedJsonSchemaConcatenatesToValidJson) {
  json body = Chat("Describe a person.",
                   {{"stream", true},
                    {"response_format",
                     {{"type", "json_schema"}, {"json_schema", {{"name", "p"}, {"schema", kPersonSchema}}}}}});
  HttpResult r = PostJson(Http(), "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const SseEvents ev = ParseSse(r.body);
  std::string content;
  ASSERT_TRUE(ev.error.empty()) << ev.error;
  for (const std::string& payload : ev.data) {
    if (payload == "[DONE]") continue;
    const json chunk = json::parse(payload);
    if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string()) content += delta["content"].get<std::string>();
  }
  ExpectPerson(content);
}

TEST_F(StructuredOutput, VllmAndLlamaServerFields) {
  HttpResult r = PostJson(Http(), "/v1/chat/completions",
                          Chat("Is the sky blue?", {{"guided_choice", json::array({"yes", "no"})}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string choice = r.Json()["choices"][0]["message"]["content"].get<std::string>();
  EXPECT_TRUE(choice == "yes" || choice == "no") << choice;

  r = PostJson(Http(), "/v1/chat/completions",
               Chat("What is the date?", {{"guided_regex", "[0-9]{4}-[0-9]{2}-[0-9]{2}"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string date = r.Json()["choices"][0]["message"]["content"].get<std::string>();
  EXPECT_TRUE(std::regex_match(date, std::regex("[0-9]{4}-[0-9]{2}-[0-9]{2}"))) << date;

  // llama-server's GBNF field, on the completions endpoint.
  r = PostJson(Http(), "/v1/completions",
               {{"prompt", "The answer is"}, {"max_tokens", 20}, {"temperature", 0},
                {"grammar", "root ::= \" \" (\"red\" | \"green\" | \"blue\")"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string colour = r.Json()["choices"][0]["text"].get<std::string>();
  EXPECT_TRUE(colour == " red" || colour == " green" || colour == " blue") << colour;

  // llama-server's json_schema field, and vLLM's structured_outputs.
  for (const json& extra : {json{{"json_schema", kPersonSchema}},
                            json{{"structured_outputs", {{"json", kPersonSchema}}}}}) {
    r = PostJson(Http(), "/v1/chat/completions", Chat("Describe a person.", extra));
    ASSERT_EQ(r.status, 200) << r.body;
    ExpectPerson(r.Json()["choices"][0]["message"]["content"].get<std::string>());
  }
}

TEST_F(StructuredOutput, BadFormatsAre400sBeforeAnyStream) {
  for (bool stream : {false, true}) {
    const json bad_schema = {{"type", "json_schema"},
                             {"json_schema", {{"name", "x"}, {"schema", {{"type", "no-such-type"}}}}}};
    HttpResult r = PostJson(Http(), "/v1/chat/completions",
                            Chat("Hi", {{"stream", stream}, {"response_format", bad_schema}}));
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("response_format"), std::string::npos) << r.body;

    r = PostJson(Http(), "/v1/chat/completions",
                 Chat("Hi", {{"stream", stream}, {"guided_regex", "([a-z"}}));
    EXPECT_EQ(r.status, 400) << r.body;

    r = PostJson(Http(), "/v1/chat/completions",
                 Chat("Hi", {{"stream", stream}, {"guided_choice", json::array({"a"})},
                             {"guided_regex", "a"}}));
    EXPECT_EQ(r.status, 400) << r.body;
  }
  HttpResult r = PostJson(Http(), "/v1/chat/completions",
                          Chat("Hi", {{"response_format", {{"type", "xml"}}}}));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("response_format.type"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace specline::testing
