// The internal proto -> RequestOptions conversion: defaults for zero
// fields, policy and sampling errors.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "scheduler/request_convert.h"

namespace specline::scheduler {
namespace {

TEST(RequestConvertTest, ProtoZerosMeanDefaults) {
  internal::SubmitRequest req;
  req.add_prompt(5);
  req.set_max_tokens(3);
  auto spec = ToRequestOptions(req);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sampling.top_p, 1.0f);
  EXPECT_EQ(spec->sampling.repetition_penalty, 1.0f);
  EXPECT_TRUE(spec->sampling.greedy());
  req.mutable_sampling()->set_seed(77);
  EXPECT_EQ(ToRequestOptions(req)->sampling.seed, 77u);
}

TEST(RequestConvertTest, TheTenantReachesTheSequence) {
  internal::SubmitRequest req;
  req.add_prompt(5);
  req.set_max_tokens(3);
  EXPECT_EQ(ToRequestOptions(req)->tenant, "") << "no authentication: the one tenant \"\"";
  req.set_tenant("alice");
  auto spec = ToRequestOptions(req);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->tenant, "alice");
  EXPECT_EQ(Sequence(1, *spec).tenant, "alice");
}

TEST(RequestConvertTest, PenaltiesBiasAndLogprobs) {
  internal::SubmitRequest req;
  req.add_prompt(5);
  req.set_max_tokens(3);
  req.mutable_sampling()->set_presence_penalty(0.5f);
  req.mutable_sampling()->set_frequency_penalty(-1.0f);
  (*req.mutable_sampling()->mutable_logit_bias())[9] = 1.0f;
  (*req.mutable_sampling()->mutable_logit_bias())[2] = -100.0f;
  auto spec = ToRequestOptions(req);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sampling.presence_penalty, 0.5f);
  EXPECT_EQ(spec->sampling.frequency_penalty, -1.0f);
  // A proto map has no order; SamplingParams wants ascending ids.
  const std::vector<std::pair<int32_t, float>> want = {{2, -100.0f}, {9, 1.0f}};
  EXPECT_EQ(spec->sampling.logit_bias, want);
  EXPECT_EQ(spec->top_logprobs, -1) << "no logprobs unless enabled";
  req.mutable_logprobs()->set_top_logprobs(4);
  EXPECT_EQ(ToRequestOptions(req)->top_logprobs, -1);
  req.mutable_logprobs()->set_enabled(true);
  EXPECT_EQ(ToRequestOptions(req)->top_logprobs, 4);
  EXPECT_EQ(Sequence(1, *ToRequestOptions(req)).top_logprobs, 4);
  req.mutable_logprobs()->set_top_logprobs(21);
  EXPECT_FALSE(ToRequestOptions(req).ok());
  req.mutable_logprobs()->set_top_logprobs(0);
  req.mutable_sampling()->set_presence_penalty(3.0f);
  EXPECT_FALSE(ToRequestOptions(req).ok());
  req.mutable_sampling()->set_presence_penalty(0.0f);
  for (int32_t i = 0; i < 301; ++i) (*req.mutable_sampling()->mutable_logit_bias())[i] = 1.0f;
  EXPECT_FALSE(ToRequestOptions(req).ok());
}

TEST(RequestConvertTest, PolicyAndSamplingErrors) {
  internal::SubmitRequest req;
  req.add_prompt(5);
  req.set_max_tokens(3);
  req.set_policy(v1::DECODING_POLICY_PIPO);
  req.set_pipo_tau(0.5f);
  auto spec = ToRequestOptions(req);
  ASSERT_TRUE(spec.ok()) << spec.status();  // whether PIPO runs here is the engine's call
  EXPECT_EQ(spec->mode, v1::DECODING_POLICY_PIPO);
  EXPECT_EQ(spec->pipo_tau, 0.5f);
  req.set_pipo_tau(-0.5f);
  EXPECT_EQ(ToRequestOptions(req).status().code(), absl::StatusCode::kInvalidArgument);
  req.clear_pipo_tau();
  EXPECT_LT(ToRequestOptions(req)->pipo_tau, 0);  // the server's default
  req.set_policy(v1::DECODING_POLICY_PTP);
  EXPECT_EQ(ToRequestOptions(req)->mode, v1::DECODING_POLICY_PTP);
  req.set_policy(v1::DECODING_POLICY_SPD);
  spec = ToRequestOptions(req);
  ASSERT_TRUE(spec.ok()) << spec.status();  // whether SPD runs here is the engine's call
  EXPECT_EQ(spec->mode, v1::DECODING_POLICY_SPD);
  req.set_policy(v1::DECODING_POLICY_UNSPECIFIED);
  EXPECT_EQ(ToRequestOptions(req, v1::DECODING_POLICY_PPSD)->mode, v1::DECODING_POLICY_PPSD);
  req.set_policy(static_cast<v1::DecodingPolicy>(42));
  EXPECT_EQ(ToRequestOptions(req).status().code(), absl::StatusCode::kInvalidArgument);
  req.set_policy(v1::DECODING_POLICY_AUTOREGRESSIVE);
  req.mutable_sampling()->set_top_p(1.5f);
  spec = ToRequestOptions(req);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("top_p"), std::string::npos);
}

TEST(RequestConvertTest, CacheScopeIsCarriedAndBounded) {
  internal::SubmitRequest req;
  req.add_prompt(5);
  req.set_max_tokens(3);
  EXPECT_EQ(ToRequestOptions(req)->cache_scope, "");  // the shared namespace
  req.set_cache_scope(std::string("p\0alice", 7));
  auto spec = ToRequestOptions(req);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->cache_scope, std::string("p\0alice", 7));  // bytes as they are
  req.set_cache_scope(std::string(kMaxCacheScopeBytes + 1, 'x'));
  spec = ToRequestOptions(req);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("cache_scope"), std::string::npos);
}

}  // namespace
}  // namespace specline::scheduler
