// Gemma 3 270M served by the real processes (`specline serve`: gateway,
// scheduler, 2 stage workers): a text prompt streamed over gRPC and over the
// OpenAI /v1/completions SSE stream gives the single-process engine's
// greedy tokens and text. Skips when scripts/setup.sh has not fetched the
// model.
#include <gtest/gtest.h>

#include "tests/http_test_client.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

using nlohmann::json;

TEST(ServingGemma, StreamsOverGrpcAndOpenAiLikeTheSingleProcessEngine) {
  const std::string model = Gemma3Path();
  if (model.empty()) GTEST_SKIP() << "Gemma 3 270M is not in the model cache (run scripts/setup.sh)";
  auto stack = StartStack(model, 2, {"--kv-capacity-tokens", "4096"});
  ReferenceEngine ref(model);
  const std::string prompt = "The capital of France is";
  const Reference want = ref.Run(ref.EncodeText(prompt), 24, false);
  ASSERT_FALSE(want.text.empty());

  v1::GenerateRequest req;
  req.set_text(prompt);
  req.set_max_tokens(24);
  const Streamed got = StreamOnce(stack->channel(), req);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.text, want.text);
  EXPECT_GT(got.messages, 1) << "the reply was not streamed";

  // The same through the OpenAI API, streamed over SSE.
  const int port = stack->ports["gateway"]["http"].get<int>();
  const json body = {{"prompt", prompt}, {"max_tokens", 24}, {"temperature", 0}, {"stream", true}};
  const HttpResult r = PostJson(port, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/event-stream");
  const SseEvents events = ParseSse(r.body);
  ASSERT_TRUE(events.error.empty()) << events.error;
  std::string text;
  int chunks = 0;
  for (const std::string& d : events.data) {
    if (d == "[DONE]") continue;
    const json chunk = json::parse(d);
    ASSERT_FALSE(chunk.contains("error")) << d;
    text += chunk["choices"].at(0)["text"].get<std::string>();
    ++chunks;
  }
  EXPECT_EQ(text, want.text);
  EXPECT_GT(chunks, 1);
  ASSERT_FALSE(events.data.empty());
  EXPECT_EQ(events.data.back(), "[DONE]");
}

}  // namespace
}  // namespace specline::testing
