// presence_penalty, frequency_penalty, logit_bias and logprobs in the OpenAI
// request bodies (services/openai/sampling_fields.cc), and the logprobs
// objects of the responses (services/openai/logprobs_json.cc), without a
// server: OpenAI's ranges, names in errors, and shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "services/openai/logprobs_json.h"
#include "services/openai/openai_request.h"
#include "services/openai/openai_response.h"

namespace specline::openai {
namespace {

using nlohmann::json;

const json kChat = {{"messages", {{{"role", "user"}, {"content", "x"}}}}};

ParsedRequest ParseOk(Endpoint e, const json& body) {
  ParsedRequest out;
  const auto error = ParseRequest(e, body.dump(), &out);
  EXPECT_FALSE(error) << (error ? error->message : "");
  return out;
}

std::string FailsOn(Endpoint e, const json& body) {
  ParsedRequest out;
  const auto error = ParseRequest(e, body.dump(), &out);
  EXPECT_TRUE(error) << body.dump();
  if (error) {
    EXPECT_EQ(error->message.rfind(error->param + ":", 0), 0u) << error->message;
  }
  return error ? error->param : "";
}

json With(json body, const json& extra) {
  body.update(extra);
  return body;
}

TEST(OpenAiSamplingFields, PenaltiesAndBiasMapToTheGenerateRequest) {
  const ParsedRequest p = ParseOk(
      Endpoint::kCompletions,
      {{"prompt", "x"}, {"presence_penalty", -2}, {"frequency_penalty", 1.5},
       {"logit_bias", {{"5", -100}, {"17", 2.5}}}});
  const v1::SamplingParams& s = p.request.sampling();
  EXPECT_FLOAT_EQ(s.presence_penalty(), -2.0f);
  EXPECT_FLOAT_EQ(s.frequency_penalty(), 1.5f);
  ASSERT_EQ(s.logit_bias_size(), 2);
  EXPECT_FLOAT_EQ(s.logit_bias().at(5), -100.0f);
  EXPECT_FLOAT_EQ(s.logit_bias().at(17), 2.5f);
  EXPECT_FALSE(p.request.logprobs().enabled());
  // Absent and null mean off.
  const ParsedRequest d = ParseOk(Endpoint::kCompletions,
                                  {{"prompt", "x"}, {"presence_penalty", nullptr}, {"logit_bias", nullptr}});
  EXPECT_EQ(d.request.sampling().presence_penalty(), 0.0f);
  EXPECT_EQ(d.request.sampling().logit_bias_size(), 0);
}

TEST(OpenAiSamplingFields, OutOfRangeValuesAreRefusedByName) {
  const json cmpl = {{"prompt", "x"}};
  EXPECT_EQ(FailsOn(Endpoint::kCompletions, With(cmpl, {{"presence_penalty", 2.01}})), "presence_penalty");
  EXPECT_EQ(FailsOn(Endpoint::kCompletions, With(cmpl, {{"frequency_penalty", "high"}})),
            "frequency_penalty");
  EXPECT_EQ(FailsOn(Endpoint::kCompletions, With(cmpl, {{"logit_bias", {{"7", 100.5}}}})), "logit_bias");
  EXPECT_EQ(FailsOn(Endpoint::kCompletions, With(cmpl, {{"logit_bias", {{"seven", 1}}}})), "logit_bias");
  EXPECT_EQ(FailsOn(Endpoint::kCompletions, With(cmpl, {{"logit_bias", {{"-3", 1}}}})), "logit_bias");
  EXPECT_EQ(FailsOn(Endpoint::kCompletions, With(cmpl, {{"logit_bias", json::array({1})}})), "logit_bias");
  json many = json::object();
  for (int i = 0; i < 301; ++i) many[std::to_string(i)] = 1;
  EXPECT_EQ(FailsOn(Endpoint::kCompletions, With(cmpl, {{"logit_bias", many}})), "logit_bias");
  EXPECT_EQ(FailsOn(Endpoint::kCompletions, With(cmpl, {{"logprobs", 21}})), "logprobs");
  EXPECT_EQ(FailsOn(Endpoint::kCompletions, With(cmpl, {{"logprobs", true}})), "logprobs");
  EXPECT_EQ(FailsOn(Endpoint::kCompletions, With(cmpl, {{"top_logprobs", 2}})), "top_logprobs");
  EXPECT_EQ(FailsOn(Endpoint::kChatCompletions, With(kChat, {{"logprobs", 1}})), "logprobs");
  EXPECT_EQ(FailsOn(Endpoint::kChatCompletions, With(kChat, {{"top_logprobs", 3}})), "top_logprobs");
  EXPECT_EQ(FailsOn(Endpoint::kChatCompletions,
                    With(kChat, {{"logprobs", true}, {"top_logprobs", 21}})),
            "top_logprobs");
}

TEST(OpenAiSamplingFields, LogprobsOptions) {
  const ParsedRequest chat =
      ParseOk(Endpoint::kChatCompletions, With(kChat, {{"logprobs", true}, {"top_logprobs", 5}}));
  EXPECT_TRUE(chat.request.logprobs().enabled());
  EXPECT_EQ(chat.request.logprobs().top_logprobs(), 5);
  const ParsedRequest off = ParseOk(Endpoint::kChatCompletions, With(kChat, {{"logprobs", false}}));
  EXPECT_FALSE(off.request.logprobs().enabled());
  // Completions: an integer; 0 asks for the chosen tokens' logprobs only.
  const ParsedRequest zero = ParseOk(Endpoint::kCompletions, {{"prompt", "x"}, {"logprobs", 0}});
  EXPECT_TRUE(zero.request.logprobs().enabled());
  EXPECT_EQ(zero.request.logprobs().top_logprobs(), 0);
  const ParsedRequest k = ParseOk(Endpoint::kCompletions, {{"prompt", "x"}, {"logprobs", 20}});
  EXPECT_EQ(k.request.logprobs().top_logprobs(), 20);
  // The shared validation's names come back in OpenAI's.
  std::string param;
  EXPECT_EQ(ToOpenAiMessage(Endpoint::kChatCompletions, "logprobs.top_logprobs: must be in [0, 20]",
                            &param),
            "top_logprobs: must be in [0, 20]");
  EXPECT_EQ(param, "top_logprobs");
  ToOpenAiMessage(Endpoint::kCompletions, "sampling.logit_bias: token id 9 is outside", &param);
  EXPECT_EQ(param, "logit_bias");
}

v1::GenerateResponse Message() {
  v1::GenerateResponse m;
  m.add_token_ids(3);
  m.add_token_ids(4);
  v1::TokenLogprob* a = m.add_logprobs();
  a->set_token_id(3);
  a->set_logprob(-0.25f);
  v1::TopLogprob* t = a->add_top();
  t->set_token_id(3);
  t->set_logprob(-0.25f);
  t = a->add_top();
  t->set_token_id(9);
  t->set_logprob(-std::numeric_limits<float>::infinity());
  v1::TokenLogprob* b = m.add_logprobs();
  b->set_token_id(4);
  b->set_logprob(std::nanf(""));  // a row the scheduler did not have
  return m;
}

TEST(OpenAiLogprobsJson, ChatShape) {
  LogprobsJson lp(Endpoint::kChatCompletions, nullptr);
  const json chunk = lp.Add(Message());
  ASSERT_EQ(chunk["content"].size(), 2u);
  EXPECT_TRUE(chunk["refusal"].is_null());
  const json& first = chunk["content"][0];
  EXPECT_EQ(first["token"], "token_id:3");
  EXPECT_FLOAT_EQ(first["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(first["bytes"], json::parse(R"([116,111,107,101,110,95,105,100,58,51])"));
  ASSERT_EQ(first["top_logprobs"].size(), 2u);
  EXPECT_EQ(first["top_logprobs"][1]["token"], "token_id:9");
  EXPECT_EQ(first["top_logprobs"][1]["logprob"], -9999.0);  // -inf, as OpenAI sends it
  EXPECT_TRUE(chunk["content"][1]["logprob"].is_null());
  lp.Add(Message());
  EXPECT_EQ(lp.Whole()["content"].size(), 4u);
  // The chunk and the whole response carry the object in choices[0].
  const ResponseIdentity who{Endpoint::kChatCompletions, "id", 0, "m", ""};
  const json whole = json::parse(
      FullResponse(who, {ChoiceResult{"t", v1::FINISH_REASON_STOP, lp.Whole()}}, v1::Usage()));
  EXPECT_EQ(whole["choices"][0]["logprobs"], lp.Whole());
  const json c = json::parse(TextChunk(who, 0, "t", &chunk));
  EXPECT_EQ(c["choices"][0]["logprobs"], chunk);
  const json none = json::parse(TextChunk(who, 0, "t"));
  EXPECT_TRUE(none["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiLogprobsJson, CompletionsShape) {
  LogprobsJson lp(Endpoint::kCompletions, nullptr);
  const json chunk = lp.Add(Message());
  EXPECT_EQ(chunk["tokens"], json::parse(R"(["token_id:3", "token_id:4"])"));
  EXPECT_FLOAT_EQ(chunk["token_logprobs"][0].get<float>(), -0.25f);
  EXPECT_TRUE(chunk["token_logprobs"][1].is_null());
  // The alternatives and the chosen token, as a dict.
  EXPECT_EQ(chunk["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(chunk["top_logprobs"][0]["token_id:9"], -9999.0);
  EXPECT_EQ(chunk["text_offset"], json::parse("[0, 10]"));
  // Offsets go on across chunks.
  const json next = lp.Add(Message());
  EXPECT_EQ(next["text_offset"], json::parse("[20, 30]"));
  EXPECT_EQ(lp.Whole()["tokens"].size(), 4u);
}

}  // namespace
}  // namespace specline::openai
