// logprobs, penalties and logit_bias through a real `specline serve` on
// loopback: the OpenAI shapes of chat (`logprobs: true, top_logprobs: k`)
// and completions (`logprobs: k`), streamed and not, carry the gRPC API's
// values token for token; their top-1 is the greedy token; penalties and a
// logit_bias change the output.
#include <cmath>
#include <string>
#include <vector>

#include "tests/http_test_client.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

using nlohmann::json;

std::string Stories260K() { return SharedModelPath("stories260K/stories260K.bin"); }

int HttpPort(const ServingStack& s) { return s.ports["gateway"]["http"].get<int>(); }

struct GrpcRun {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::vector<v1::TokenLogprob> logprobs;
  std::string text;
};

GrpcRun RunGrpc(ServingStack& stack, const v1::GenerateRequest& req) {
  auto stub = v1::Generation::NewStub(stack.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 120s);
  GrpcRun out;
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    // Aligned in every message, not only in total.
    EXPECT_EQ(msg.logprobs_size(), req.logprobs().enabled() ? msg.token_ids_size() : 0);
    out.tokens.insert(out.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
    out.logprobs.insert(out.logprobs.end(), msg.logprobs().begin(), msg.logprobs().end());
    out.text += msg.text();
  }
  out.status = reader->Finish();
  return out;
}

// The chunks of an SSE stream (without [DONE]).
std::vector<json> StreamChunks(int port, const std::string& target, const json& body) {
  const HttpResult r = PostJson(port, target, body);
  EXPECT_EQ(r.status, 200) << r.body;
  std::vector<json> out;
  for (const std::string& d : ParseSse(r.body).data) {
    if (d == "[DONE]") continue;
    out.push_back(json::parse(d));
  }
  return out;
}

std::string BytesOf(const json& bytes) {
  std::string s;
  for (const json& b : bytes) s.push_back(static_cast<char>(b.get<int>()));
  return s;
}

TEST(ServingLogprobs, ChatShapesCarryTheGrpcValues) {
  const std::string model = SmolLm2Path();
  if (model.empty()) GTEST_SKIP() << "SmolLM2 absent (scripts/setup.sh fetches it)";
  auto stack = StartStack(model, 1);
  const int port = HttpPort(*stack);
  constexpr int kTokens = 8;
  constexpr int kTop = 3;

  v1::GenerateRequest req;
  auto* m = req.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Name three colours.");
  req.set_max_tokens(kTokens);
  req.mutable_logprobs()->set_enabled(true);
  req.mutable_logprobs()->set_top_logprobs(kTop);
  const GrpcRun grpc = RunGrpc(*stack, req);
  ASSERT_TRUE(grpc.status.ok()) << grpc.status.error_message();
  ASSERT_EQ(grpc.logprobs.size(), grpc.tokens.size());
  ASSERT_FALSE(grpc.tokens.empty());
  for (size_t i = 0; i < grpc.tokens.size(); ++i) {
    EXPECT_EQ(grpc.logprobs[i].token_id(), grpc.tokens[i]);
    ASSERT_EQ(grpc.logprobs[i].top_size(), kTop);
    EXPECT_EQ(grpc.logprobs[i].top(0).token_id(), grpc.tokens[i]) << "top-1 is the greedy token";
    EXPECT_LE(grpc.logprobs[i].logprob(), 0.0f);
  }

  const json body = {{"messages", {{{"role", "user"}, {"content", "Name three colours."}}}},
                     {"max_tokens", kTokens},
                     {"temperature", 0},
                     {"logprobs", true},
                     {"top_logprobs", kTop}};
  const HttpResult whole = PostJson(port, "/v1/chat/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json choice = whole.Json()["choices"][0];
  const json& content = choice["logprobs"]["content"];
  ASSERT_TRUE(content.is_array()) << choice.dump();
  ASSERT_EQ(content.size(), grpc.tokens.size());
  EXPECT_TRUE(choice["logprobs"]["refusal"].is_null());
  std::string spelled;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& e = content[i];
    EXPECT_FLOAT_EQ(e["logprob"].get<float>(), grpc.logprobs[i].logprob()) << i;
    ASSERT_EQ(e["top_logprobs"].size(), static_cast<size_t>(kTop));
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
    EXPECT_FLOAT_EQ(e["top_logprobs"][1]["logprob"].get<float>(), grpc.logprobs[i].top(1).logprob());
    EXPECT_TRUE(e["bytes"].is_array());
    spelled += BytesOf(e["bytes"]);
  }
  // The tokens' bytes spell the text (when no end token ended it).
  if (choice["finish_reason"] == "length") {
    EXPECT_EQ(spelled, choice["message"]["content"].get<std::string>());
  }

  // Streamed: each chunk carries its own tokens' entries; together they are
  // the non-streamed list.
  json streamed = body;
  streamed["stream"] = true;
  json collected = json::array();
  for (const json& c : StreamChunks(port, "/v1/chat/completions", streamed)) {
    const json& lp = c["choices"][0]["logprobs"];
    if (lp.is_null()) continue;
    for (const json& e : lp["content"]) collected.push_back(e);
  }
  EXPECT_EQ(collected, content);

  // Without logprobs: null, as OpenAI sends.
  json plain = body;
  plain.erase("logprobs");
  plain.erase("top_logprobs");
  const HttpResult none = PostJson(port, "/v1/chat/completions", plain);
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_TRUE(none.Json()["choices"][0]["logprobs"].is_null());
  // top_logprobs needs logprobs, and is at most 20.
  json bad = body;
  bad["top_logprobs"] = 21;
  EXPECT_EQ(PostJson(port, "/v1/chat/completions", bad).status, 400);
  bad = body;
  bad["logprobs"] = false;
  EXPECT_EQ(PostJson(port, "/v1/chat/completions", bad).status, 400);
}

TEST(ServingLogprobs, CompletionShapesAndPenalties) {
  if (Stories260K().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto stack = StartStack(Stories260K(), 2);
  const int port = HttpPort(*stack);
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0},
                     {"logprobs", 2}};
  const HttpResult whole = PostJson(port, "/v1/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.body;
  const json choice = whole.Json()["choices"][0];
  const json& lp = choice["logprobs"];
  ASSERT_TRUE(lp.is_object()) << choice.dump();
  const size_t n = lp["tokens"].size();
  ASSERT_EQ(n, 12u);
  ASSERT_EQ(lp["token_logprobs"].size(), n);
  ASSERT_EQ(lp["top_logprobs"].size(), n);
  ASSERT_EQ(lp["text_offset"].size(), n);
  std::string joined;
  for (size_t i = 0; i < n; ++i) {
    const std::string token = lp["tokens"][i].get<std::string>();
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joined.size());
    joined += token;
    const json& top = lp["top_logprobs"][i];
    // Two alternatives, the greedy token the most likely of them.
    ASSERT_EQ(top.size(), 2u) << top.dump();
    ASSERT_TRUE(top.contains(token));
    for (const auto& [t, v] : top.items()) EXPECT_LE(v.get<double>(), top[token].get<double>());
    EXPECT_FLOAT_EQ(top[token].get<float>(), lp["token_logprobs"][i].get<float>());
  }
  EXPECT_EQ(joined, choice["text"].get<std::string>());

  json streamed = body;
  streamed["stream"] = true;
  json tokens = json::array(), values = json::array();
  for (const json& c : StreamChunks(port, "/v1/completions", streamed)) {
    const json& l = c["choices"][0]["logprobs"];
    if (l.is_null()) continue;
    for (const json& t : l["tokens"]) tokens.push_back(t);
    for (const json& v : l["token_logprobs"]) values.push_back(v);
  }
  EXPECT_EQ(tokens, lp["tokens"]);
  EXPECT_EQ(values, lp["token_logprobs"]);

  // Banning the greedy first token changes it; penalties are accepted in
  // OpenAI's ranges and refused outside them.
  v1::GenerateRequest req;
  req.set_text("Once upon a time");
  req.set_max_tokens(12);
  const GrpcRun plain = RunGrpc(*stack, req);
  ASSERT_TRUE(plain.status.ok());
  json banned = {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0},
                 {"logit_bias", {{std::to_string(plain.tokens[0]), -100}}},
                 {"presence_penalty", 1.5}, {"frequency_penalty", 0.5}};
  const HttpResult b = PostJson(port, "/v1/completions", banned);
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_NE(b.Json()["choices"][0]["text"], plain.text);
  (*req.mutable_sampling()->mutable_logit_bias())[plain.tokens[0]] = -100;
  req.mutable_sampling()->set_presence_penalty(1.5f);
  req.mutable_sampling()->set_frequency_penalty(0.5f);
  const GrpcRun biased = RunGrpc(*stack, req);
  ASSERT_TRUE(biased.status.ok());
  EXPECT_NE(biased.tokens[0], plain.tokens[0]);
  EXPECT_EQ(b.Json()["choices"][0]["text"], biased.text);  // same through both APIs
  (*req.mutable_sampling()->mutable_logit_bias())[1 << 20] = 1;  // outside the vocabulary
  EXPECT_EQ(RunGrpc(*stack, req).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace specline::testing
