// A chat template given with `specline serve --chat-template FILE`, on a real
// deployment on loopback: the OpenAI API's chat completions and
// /apply-template render it, a conversation the template refuses gets a 400
// carrying the template's own message, and `specline chat-template` prints
// the same prompt. stories260K is a base model: without --chat-template its
// chat requests are refused, saying how to give one.
#include <cstdio>
#include <fstream>

#include "model/formats/model_source.h"
#include "model/tokenizer/model_tokenizer.h"
#include "tests/http_test_client.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

using nlohmann::json;

std::string Stories260K() { return SharedModelPath("stories260K/stories260K.bin"); }

// Refuses a system turn, as Gemma's and Mistral's templates do.
constexpr char kTemplate[] =
    "{{ bos_token }}{% for m in messages %}"
    "{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{{ m.role }}: {{ m.content | trim }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

std::string TemplateFile() {
  static const std::string path = [] {
    const std::string p = TempDir() + "/story.jinja";
    std::ofstream(p) << kTemplate;
    return p;
  }();
  return path;
}

// Runs a command line; its stdout, and its exit status in *status.
std::string RunCapture(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

class ChatTemplateServing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    stack_ = StartStack(Stories260K(), 1, {"--chat-template", TemplateFile()}).release();
  }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  static int Http() { return stack_->ports["gateway"]["http"].get<int>(); }
  static ServingStack* stack_;
};
ServingStack* ChatTemplateServing::stack_ = nullptr;

const json kConversation = json::array({{{"role", "user"}, {"content", " Once upon a time "}}});
constexpr char kPrompt[] = "<s>user: Once upon a time\nassistant:";

TEST_F(ChatTemplateServing, ApplyTemplateAnswersThePrompt) {
  HttpResult r = PostJson(Http(), "/apply-template", {{"messages", kConversation}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["prompt"], kPrompt);

  r = PostJson(Http(), "/apply-template",
               {{"messages", kConversation}, {"add_generation_prompt", false}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["prompt"], "<s>user: Once upon a time\n");
}

// The chat completion generates from exactly the rendered prompt: the same
// greedy text as a completion of that prompt's tokens.
TEST_F(ChatTemplateServing, ChatCompletionGeneratesFromTheRenderedPrompt) {
  auto model = OpenModel(Stories260K());
  auto tokenizer = OpenTokenizerFor(*model);
  const std::vector<int32_t> ids = tokenizer->Encode(kPrompt, /*add_bos=*/false,
                                                     /*parse_special=*/true);
  ASSERT_EQ(ids.front(), tokenizer->bos_id());

  HttpResult chat = PostJson(Http(), "/v1/chat/completions",
                             {{"messages", kConversation}, {"max_tokens", 24}, {"temperature", 0}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  HttpResult completion = PostJson(Http(), "/v1/completions",
                                   {{"prompt", ids}, {"max_tokens", 24}, {"temperature", 0}});
  ASSERT_EQ(completion.status, 200) << completion.body;
  const json c = chat.Json(), p = completion.Json();
  EXPECT_EQ(c["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(c["choices"][0]["message"]["content"], p["choices"][0]["text"]);
  EXPECT_FALSE(p["choices"][0]["text"].get<std::string>().empty());
}

TEST_F(ChatTemplateServing, ATurnTheTemplateRefusesIsA400WithItsMessage) {
  const json refused = json::array({{{"role", "system"}, {"content", "Be brief."}},
                                    {{"role", "user"}, {"content", "Hi"}}});
  for (const char* target : {"/v1/chat/completions", "/apply-template"}) {
    SCOPED_TRACE(target);
    for (bool stream : {false, true}) {
      json body = {{"messages", refused}};
      if (std::string(target) != "/apply-template") body["stream"] = stream;
      const HttpResult r = PostJson(Http(), target, body);
      EXPECT_EQ(r.status, 400) << r.body;
      const json e = r.Json()["error"];
      EXPECT_NE(e["message"].get<std::string>().find("System role not supported"), std::string::npos)
          << r.body;
      EXPECT_EQ(e["param"], "messages") << r.body;
    }
  }
  // The deployment is unharmed: the next conversation is served.
  const HttpResult ok = PostJson(Http(), "/v1/chat/completions",
                                 {{"messages", kConversation}, {"max_tokens", 4}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// This template renders no `tools`: a request with tools gets them in the
// generic tool form (services/tool_calls/generic_prompt.h), written into
// the first user turn since the template refuses system turns; with
// tool_choice "none" the tools are left out.
TEST_F(ChatTemplateServing, ToolsOnATemplateWithoutThemTakeTheGenericForm) {
  const json tools = json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  HttpResult generic = PostJson(Http(), "/apply-template", {{"messages", kConversation}, {"tools", tools}});
  ASSERT_EQ(generic.status, 200) << generic.body;
  const std::string prompt = generic.Json()["prompt"];
  EXPECT_EQ(prompt.find("<s>user: You can call functions"), 0u) << prompt;
  EXPECT_NE(prompt.find("[{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}]"), std::string::npos) << prompt;
  generic = PostJson(Http(), "/v1/chat/completions",
                     {{"messages", kConversation}, {"tools", tools}, {"max_tokens", 8}});
  EXPECT_EQ(generic.status, 200) << generic.body;
  HttpResult r = PostJson(Http(), "/apply-template",
                          {{"messages", kConversation}, {"tools", tools}, {"tool_choice", "none"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["prompt"], kPrompt);
  r = PostJson(Http(), "/v1/chat/completions",
               {{"messages", kConversation}, {"tools", tools}, {"tool_choice", "none"}, {"max_tokens", 4}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.Json()["choices"][0]["message"]["content"].is_string()) << r.body;
}

TEST_F(ChatTemplateServing, CommandLinePrintsTheSamePrompt) {
  const std::string messages = TempDir() + "/messages.json";
  std::ofstream(messages) << kConversation.dump();
  int status = -1;
  const std::string out =
      RunCapture(BinaryPath("specline") + " chat-template --template " + TemplateFile() +
                     " --messages @" + messages + " --bos-token '<s>'",
                 &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(out, kPrompt);
  // Without --bos-token and a model, bos_token prints nothing.
  const std::string bare = RunCapture(BinaryPath("specline") + " chat-template --template " +
                                          TemplateFile() + " --messages @" + messages +
                                          " --no-generation-prompt",
                                      &status);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(bare, "user: Once upon a time\n");
  // A base model without one says so.
  RunCapture(BinaryPath("specline") + " chat-template --model " + Stories260K() +
                 " --messages @" + messages + " 2>/dev/null",
             &status);
  EXPECT_NE(status, 0);
}

}  // namespace
}  // namespace specline::testing
