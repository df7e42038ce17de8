// The official `openai` Python package as a test client: the Python that
// has it (scripts/setup.sh makes it: $SPECLINE_CLIENT_VENV, by default
// ~/.cache/specline/client-venv), and tests/python/openai_client.py's
// checks against a live API. Shared by python_client_test (one gateway) and
// serving_replicas_test (a router in front of replicas).
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/serving_stack.h"

namespace specline::testing {

// "" when there is none.
inline std::string FindOpenAiPython() {
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

// The openai package streams and non-streams both endpoints at
// http://127.0.0.1:`http_port`/v1 (a gateway, or a router in front of
// several); greedy text equals what the gRPC API at `channel` gives for the
// same request, usage is exact, and errors come back as the package's
// exception types naming the field. `model_name` is what the API serves.
inline void CheckOpenAiPackage(const std::shared_ptr<grpc::Channel>& channel, int http_port,
                               const std::string& model_name, bool chat) {
  const std::string python = FindOpenAiPython();
  ASSERT_FALSE(python.empty())
      << "no Python with the openai package (scripts/setup.sh makes ~/.cache/specline/client-venv)";
  const std::string dir = TempDir();
  const std::string prompt = "Once upon a time";
  const int max_tokens = 24;
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
                    " --base-url http://127.0.0.1:" + std::to_string(http_port) + "/v1" +
                    " --model " + model_name + " --prompt '" +
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


}  // namespace specline::testing
