// A third-party client: tests/python/grpcio_client.py drives the public API
// with Python's grpcio (stubs generated at test time by grpc_tools.protoc)
// against a live `specline serve` stack.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/openai_python.h"
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

// The openai package against one pipeline's gateway.
void RunOpenAiPackage(const std::string& model, int stages, bool chat) {
  auto stack = StartStack(model, stages);
  CheckOpenAiPackage(stack->channel(), stack->ports["gateway"]["http"].get<int>(),
                     std::filesystem::path(model).stem().string(), chat);
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
// calls are Hermes <tool_call> JSON; the same tool loop on the Responses
// API (function_call items, arguments streamed in deltas).
TEST(PythonClient, OpenAiPackageAgentsOnTheDefaultModel) {
  const std::string model = SmolLm2Path();
  if (model.empty()) GTEST_SKIP() << "the default model is absent (scripts/setup.sh fetches it)";
  RunAgents(model, {"--chat-template", SourcePath("tests/data/jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja")},
            "--parse --tools --responses-tools");
}

// A second family: Gemma 3 (the 270M base model, so served with Gemma 2's
// instruction template, which Gemma 3's shares).
TEST(PythonClient, OpenAiPackageParseOnGemma3) {
  const std::string model = Gemma3Path();
  if (model.empty()) GTEST_SKIP() << "Gemma 3 270M is absent (scripts/setup.sh fetches it)";
  RunAgents(model, {"--chat-template", SourcePath("tests/data/jinja/templates/google-gemma-2-2b-it.jinja")},
            "--parse");
}

// Anthropic's `anthropic` package on the Messages API
// (tests/python/anthropic_client.py), with x-api-key auth, on the default
// model with its own template, which renders no tools: they go through the
// generic form (docs/openai_api.md "Tool calls").
TEST(PythonClient, AnthropicPackageOnTheDefaultModel) {
  const std::string model = SmolLm2Path();
  if (model.empty()) GTEST_SKIP() << "the default model is absent (scripts/setup.sh fetches it)";
  const std::string python = FindOpenAiPython();
  ASSERT_FALSE(python.empty()) << "no client venv (scripts/setup.sh makes ~/.cache/specline/client-venv)";
  const std::string dir = TempDir();
  std::ofstream(dir + "/tokens") << "claude tok-claude\n";
  auto stack = StartStack(model, 1, {"--auth-token-file", dir + "/tokens"});
  const std::string cmd = python + " " + SourcePath("tests/python/anthropic_client.py") +
                          " --base-url http://127.0.0.1:" +
                          std::to_string(stack->ports["gateway"]["http"].get<int>()) +
                          " --model " + std::filesystem::path(model).stem().string() + " --api-key tok-claude";
  const int rc = std::system((cmd + " > " + dir + "/anthropic.log 2>&1").c_str());
  EXPECT_EQ(rc, 0) << ReadFile(dir + "/anthropic.log");
}

}  // namespace
}  // namespace specline::testing
