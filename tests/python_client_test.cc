// A third-party client: tests/python/grpcio_client.py drives the public API
// with Python's grpcio (stubs generated at test time by grpc_tools.protoc)
// against a live `specline serve` stack.
#include <cstdlib>
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

}  // namespace
}  // namespace specline::testing
