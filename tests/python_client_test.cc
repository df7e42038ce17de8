// A third-party client: tests/python/grpcio_client.py drives the public API
// with Python's grpcio (stubs generated at test time by grpc_tools.protoc)
// against a live `specline serve` stack.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

// The first interpreter that has grpcio and grpc_tools: `python3` on PATH
// may be a pyenv or venv one without Debian's packages.
std::string FindPython() {
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    const std::string probe = std::string(py) + " -c 'import grpc, grpc_tools' > /dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return py;
  }
  return "";
}

TEST(PythonClient, GrpcioStreamsAndGetsInvalidArgument) {
  const std::string python = FindPython();
  if (python.empty())
    GTEST_SKIP() << "no python3 with grpc and grpc_tools (Debian: python3-grpcio python3-grpc-tools)";
  const std::string model = SharedModelPath("stories260K/stories260K.bin");
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto stack = StartStack(model, 2);
  ReferenceEngine ref(model);
  const std::string prompt = "Once upon a time";
  const int max_tokens = 48;
  const std::string dir = TempDir();
  {
    std::ofstream out(dir + "/expected.txt", std::ios::binary);
    out << ref.Run(ref.EncodeText(prompt), max_tokens, false).text;
  }
  const std::string cmd = python + " " + SourcePath("tests/python/grpcio_client.py") +
                          " --addr " + stack->gateway() + " --proto-root " + SourcePath("proto") +
                          " --prompt '" + prompt + "' --max-tokens " + std::to_string(max_tokens) +
                          " --expect-text-file " + dir + "/expected.txt > " + dir +
                          "/py.log 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << ReadFile(dir + "/py.log");
}

// The Python with the official `openai` package (scripts/setup.sh makes it:
// $SPECLINE_CLIENT_VENV, by default ~/.cache/specline/client-venv).
std::string FindOpenAiPython() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("SPECLINE_CLIENT_VENV"))
    candidates.push_back(std::string(env) + "/bin/python");
  if (const char* home = std::getenv("HOME"))
    candidates.push_back(std::string(home) + "/.cache/specline/client-venv/bin/python");
  for (const std::string& py : candidates) {
    if (std::system((py + " -c 'import openai' > /dev/null 2>&1").c_str()) == 0) return py;
  }
  return "";
}

// The openai package streams and non-streams both endpoints; greedy text
// equals the gRPC API's for the same request, usage is exact, and errors
// come back as the package's exception types naming the field.
void RunOpenAiPackage(const std::string& model, int stages, bool chat) {
  const std::string python = FindOpenAiPython();
  if (python.empty())
    GTEST_SKIP() << "no Python with the openai package (scripts/setup.sh makes ~/.cache/specline/client-venv)";
  auto stack = StartStack(model, stages);
  const std::string dir = TempDir();
  const std::string prompt = "Once upon a time";
  const int max_tokens = 24;
  auto channel = stack->channel();
  v1::GenerateRequest req;
  req.set_text(prompt);
  req.set_max_tokens(max_tokens);
  req.mutable_logprobs()->set_enabled(true);  // the values the package must see too
  const Streamed text = StreamOnce(channel, req);
  ASSERT_TRUE(text.status.ok()) << text.status.error_message();
  std::ofstream(dir + "/completion.txt", std::ios::binary) << text.text;
  {
    // Every message's logprobs, one value a line.
    auto stub = v1::Generation::NewStub(channel);
    grpc::ClientContext ctx;
    auto reader = stub->Generate(&ctx, req);
    std::ofstream lp(dir + "/logprobs.txt");
    lp.precision(9);
    v1::GenerateResponse msg;
    while (reader->Read(&msg)) {
      for (const v1::TokenLogprob& t : msg.logprobs()) lp << t.logprob() << "\n";
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  std::string cmd = python + " " + SourcePath("tests/python/openai_client.py") +
                    " --base-url http://127.0.0.1:" +
                    std::to_string(stack->ports["gateway"]["http"].get<int>()) + "/v1" +
                    " --model " + std::filesystem::path(model).stem().string() + " --prompt '" +
                    prompt + "' --max-tokens " + std::to_string(max_tokens) +
                    " --expect-text-file " + dir + "/completion.txt --expect-prompt-tokens " +
                    std::to_string(text.last.usage().prompt_tokens()) +
                    " --expect-completion-tokens " + std::to_string(text.tokens.size()) +
                    " --expect-logprobs-file " + dir + "/logprobs.txt";
  if (chat) {
    const std::string question = "What is the capital of France?";
    v1::GenerateRequest chat_req;
    auto* m = chat_req.mutable_chat()->add_messages();
    m->set_role("user");
    m->set_content(question);
    chat_req.set_max_tokens(max_tokens);
    const Streamed answer = StreamOnce(channel, chat_req);
    ASSERT_TRUE(answer.status.ok()) << answer.status.error_message();
    std::ofstream(dir + "/chat.txt", std::ios::binary) << answer.text;
    cmd += " --chat-prompt '" + question + "' --expect-chat-file " + dir +
           "/chat.txt --expect-chat-prompt-tokens " +
           std::to_string(answer.last.usage().prompt_tokens()) +
           " --expect-chat-completion-tokens " + std::to_string(answer.tokens.size());
  }
  const int rc = std::system((cmd + " > " + dir + "/py.log 2>&1").c_str());
  EXPECT_EQ(rc, 0) << ReadFile(dir + "/py.log");
}

TEST(PythonClient, OpenAiPackageOnStories260K) {
  const std::string model = SharedModelPath("stories260K/stories260K.bin");
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  RunOpenAiPackage(model, 2, /*chat=*/false);  // stories260K has no chat template
}

TEST(PythonClient, OpenAiPackageOnTheDefaultModel) {
  const std::string model = SmolLm2Path();
  if (model.empty())
    GTEST_SKIP() << "the default model is absent (scripts/setup.sh fetches it)";
  RunOpenAiPackage(model, 1, /*chat=*/true);
}

// The agents' API through the openai package (tests/python/openai_agents.py):
// chat.completions.parse into a pydantic model, and a tool-calling loop
// (tool_choice "required", the tool's result, then "auto").
void RunAgents(const std::string& model, std::vector<std::string> serve_flags,
               const std::string& checks) {
  const std::string python = FindOpenAiPython();
  if (python.empty())
    GTEST_SKIP() << "no Python with the openai package (scripts/setup.sh makes ~/.cache/specline/client-venv)";
  auto stack = StartStack(model, 1, std::move(serve_flags));
  const std::string dir = TempDir();
  const std::string cmd = python + " " + SourcePath("tests/python/openai_agents.py") +
                          " --base-url http://127.0.0.1:" +
                          std::to_string(stack->ports["gateway"]["http"].get<int>()) + "/v1" +
                          " --model " + std::filesystem::path(model).stem().string() + " " + checks;
  const int rc = std::system((cmd + " > " + dir + "/agents.log 2>&1").c_str());
  EXPECT_EQ(rc, 0) << ReadFile(dir + "/agents.log");
}

// SmolLM2's own template renders no tools: served with Qwen2.5's, whose
// calls are Hermes <tool_call> JSON.
TEST(PythonClient, OpenAiPackageAgentsOnTheDefaultModel) {
  const std::string model = SmolLm2Path();
  if (model.empty()) GTEST_SKIP() << "the default model is absent (scripts/setup.sh fetches it)";
  RunAgents(model, {"--chat-template", SourcePath("tests/data/jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja")},
            "--parse --tools");
}

// A second family: Gemma 3 (the 270M base model, so served with Gemma 2's
// instruction template, which Gemma 3's shares).
TEST(PythonClient, OpenAiPackageParseOnGemma3) {
  const std::string model = Gemma3Path();
  if (model.empty()) GTEST_SKIP() << "Gemma 3 270M is absent (scripts/setup.sh fetches it)";
  RunAgents(model, {"--chat-template", SourcePath("tests/data/jinja/templates/google-gemma-2-2b-it.jinja")},
            "--parse");
}

}  // namespace
}  // namespace specline::testing
