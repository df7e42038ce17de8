// The gateway's tokens-per-minute quota (services/token_quota.h) with the
// clock passed in: a full bucket to start, refusals that say when to retry
// (whole seconds, rounded up), refill at limit / 60 per second, unused
// tokens given back, requests that can never fit, and principals apart.
#include "services/token_quota.h"

#include <gtest/gtest.h>

namespace specline {
namespace {

using namespace std::chrono_literals;

const TokenQuota::Clock::time_point kT0 = TokenQuota::Clock::time_point{} + 1000s;

TEST(TokenQuotaTest, OffTakesAnything) {
  TokenQuota q(0);
  EXPECT_FALSE(q.enabled());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(q.Take("a", 1'000'000, kT0).ok);
}

TEST(TokenQuotaTest, AFullMinuteAtOnceThenRefusalsSayWhenToRetry) {
  TokenQuota q(600);  // 10 tokens a second
  EXPECT_TRUE(q.Take("a", 600, kT0).ok) << "a new principal starts with a minute's worth";
  TokenQuota::Decision d = q.Take("a", 1, kT0);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.retry_after_seconds, 1) << "0.1 s, rounded up to whole seconds";
  d = q.Take("a", 100, kT0);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.retry_after_seconds, 10);
  d = q.Take("a", 100, kT0 + 9s);
  EXPECT_FALSE(d.ok) << "90 tokens are back, not 100";
  EXPECT_EQ(d.retry_after_seconds, 1);
  EXPECT_TRUE(q.Take("a", 100, kT0 + 10s).ok) << "when the first refusal said";
  EXPECT_FALSE(q.Take("a", 1, kT0 + 10s).ok);
}

TEST(TokenQuotaTest, TheBucketNeverHoldsMoreThanAMinute) {
  TokenQuota q(600);
  EXPECT_TRUE(q.Take("a", 100, kT0).ok);
  EXPECT_TRUE(q.Take("a", 600, kT0 + 3600s).ok) << "an hour idle refills to a minute's worth";
  EXPECT_FALSE(q.Take("a", 1, kT0 + 3600s).ok) << "and no more";
}

TEST(TokenQuotaTest, UnusedTokensComeBack) {
  TokenQuota q(600);
  EXPECT_TRUE(q.Take("a", 600, kT0).ok);  // prompt + max_tokens
  q.Return("a", 250, kT0);                 // it generated 250 fewer
  EXPECT_TRUE(q.Take("a", 250, kT0).ok);
  EXPECT_FALSE(q.Take("a", 1, kT0).ok);
  q.Return("a", 10'000, kT0 + 1s);
  EXPECT_TRUE(q.Take("a", 600, kT0 + 1s).ok) << "returns fill the bucket up to a minute";
  EXPECT_FALSE(q.Take("a", 1, kT0 + 1s).ok);
}

TEST(TokenQuotaTest, MoreThanAMinuteIsRefusedWithoutARetryTime) {
  TokenQuota q(600);
  const TokenQuota::Decision d = q.Take("a", 601, kT0);
  EXPECT_FALSE(d.ok);
  EXPECT_EQ(d.retry_after_seconds, 0) << "no wait makes it fit";
  EXPECT_TRUE(q.Take("a", 600, kT0).ok) << "the refusal took nothing";
}

TEST(TokenQuotaTest, PrincipalsHaveTheirOwnBuckets) {
  TokenQuota q(600);
  EXPECT_TRUE(q.Take("alice", 600, kT0).ok);
  EXPECT_FALSE(q.Take("alice", 1, kT0).ok);
  EXPECT_TRUE(q.Take("bob", 600, kT0).ok);
  EXPECT_TRUE(q.Take("", 600, kT0).ok) << "no authentication: one principal \"\"";
}

}  // namespace
}  // namespace specline
