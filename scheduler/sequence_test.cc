// The stop rule (Sequence::MayGenerateAt, RoomAheadFrom): the bounds that
// the engine's EmitTokenLocked and every drafting policy ask, against
// Generate's (model/runtime/generator.cc) at max_tokens and at the end of
// the context. Needs no pipeline.
#include <gtest/gtest.h>

#include "scheduler/no_engine_for_test.h"
#include "scheduler/policies/autoregressive.h"
#include "scheduler/sequence.h"

namespace specline::scheduler {
namespace {

// A policy whose positions are not tokens, as PIPO's pairs.
class PairsPolicy : public AutoregressivePolicy {
 public:
  using AutoregressivePolicy::AutoregressivePolicy;
  bool LimitedByContext() const override { return false; }
};

std::shared_ptr<Sequence> Seq(DecodingPolicy& policy, int prompt, int max_tokens,
                              int32_t context_len) {
  RequestOptions spec;
  spec.prompt.assign(prompt, 1);
  spec.max_tokens = max_tokens;
  auto s = std::make_shared<Sequence>(1, spec);
  s->context_len = context_len;
  policy.Attach(*s, nullptr);
  return s;
}

TEST(SequenceStopRuleTest, MaxTokensBoundsGenerationAndDrafts) {
  NoEngine host;
  AutoregressivePolicy plain(host);
  auto s = Seq(plain, 3, 4, 100);  // tokens at positions 3..6
  EXPECT_TRUE(s->MayGenerateAt(3));
  EXPECT_TRUE(s->MayGenerateAt(6));
  EXPECT_FALSE(s->MayGenerateAt(7)) << "a fifth token";
  EXPECT_EQ(s->RoomAheadFrom(3), 4);
  EXPECT_EQ(s->RoomAheadFrom(6), 1);
  EXPECT_LE(s->RoomAheadFrom(7), 0);
}

TEST(SequenceStopRuleTest, TheContextEndsTokensOnePastItsLastRow) {
  NoEngine host;
  AutoregressivePolicy plain(host);
  auto s = Seq(plain, 3, 100, 8);  // rows 0..7
  // As Generate: the last row (7) still decides a token (position 8).
  EXPECT_TRUE(s->MayGenerateAt(8));
  EXPECT_FALSE(s->MayGenerateAt(9));
  // A draft is a row of its own: drafts fit at positions 3..7 only.
  EXPECT_EQ(s->RoomAheadFrom(3), 5);
  EXPECT_EQ(s->RoomAheadFrom(7), 1);
  EXPECT_LE(s->RoomAheadFrom(8), 0);
}

TEST(SequenceStopRuleTest, PositionsThatAreNotTokensLeaveTheContextToThePolicy) {
  NoEngine host;
  PairsPolicy pairs(host);
  auto s = Seq(pairs, 3, 100, 8);
  EXPECT_TRUE(s->MayGenerateAt(50));
  EXPECT_FALSE(s->MayGenerateAt(103));  // max_tokens still holds
  EXPECT_EQ(s->RoomAheadFrom(3), 5) << "rows still need the context";
}

}  // namespace
}  // namespace specline::scheduler
