// DraftLengthRule: the draft count that maximises expected tokens per unit
// of time, against a hand computation; nothing when no count beats plain
// decoding; the acceptance estimates it learns per source and position.
#include "scheduler/policies/draft_length.h"

#include <gtest/gtest.h>

namespace specline::scheduler {
namespace {

double Linear(int rows, double extra) { return 1.0 + extra * (rows - 1); }

const DraftKind kRecycling{DraftSource::kTokenRecycling};
const DraftKind kLookup{DraftSource::kPromptLookup};
const DraftKind kRecent{DraftSource::kRecentRequests};

TEST(DraftLengthRule, FreeRowsDraftEverythingDearRowsNothing) {
  DraftLengthRule rule;  // every a_j at the prior, 0.5
  // Flat curve (a GPU): every draft adds expected tokens for free.
  EXPECT_EQ(rule.Choose(kRecycling, 6, [](int) { return 1.0; }), 6);
  // Each row as dear as a call: rate(k) = (2 - 0.5^k) / (k + 1) < 1.
  EXPECT_EQ(rule.Choose(kRecycling, 6, [](int r) { return double(r); }), 0);
  EXPECT_EQ(rule.Choose(kRecycling, 0, [](int) { return 1.0; }), 0);
}

TEST(DraftLengthRule, ChoosesTheBestRateByHand) {
  DraftLengthRule rule;
  // Teach the own-text source a high acceptance: a_j -> 1 for the first 4.
  for (int i = 0; i < 400; ++i) rule.Record(kLookup, 4, 4);
  for (int j = 1; j <= 4; ++j) EXPECT_GT(rule.Acceptance(kLookup, j), 0.99) << j;
  // Position 5 never saw a verification: still the prior.
  EXPECT_DOUBLE_EQ(rule.Acceptance(kLookup, 5), 0.5);
  // Other sources are untouched.
  EXPECT_DOUBLE_EQ(rule.Acceptance(kRecycling, 1), 0.5);
  // Cost 1 + 0.3 (rows - 1): rate(4) ~ 5 / 2.2 = 2.27; rate(5) ~ 5.5 / 2.5 =
  // 2.2; rate(6) ~ 5.75 / 2.8: four drafts.
  auto cost = [](int r) { return Linear(r, 0.3); };
  EXPECT_EQ(rule.Choose(kLookup, 8, cost), 4);
  EXPECT_EQ(rule.Choose(kLookup, 2, cost), 2);  // no more are available
}

TEST(DraftLengthRule, LearnsRejectionsAtTheFirstWrongDraft) {
  DraftLengthRule rule;
  // Drafts of 3, the first always rejected: a_1 -> 0; positions 2 and 3
  // saw nothing (their drafts were never judged).
  for (int i = 0; i < 400; ++i) rule.Record(kRecycling, 3, 0);
  EXPECT_LT(rule.Acceptance(kRecycling, 1), 0.01);
  EXPECT_DOUBLE_EQ(rule.Acceptance(kRecycling, 2), 0.5);
  // With a_1 near 0 even a cheap curve drafts nothing.
  EXPECT_EQ(rule.Choose(kRecycling, 4, [](int r) { return Linear(r, 0.05); }), 0);
  // Accepted twice, rejected at the third: a_1, a_2 up, a_3 down.
  DraftLengthRule other;
  for (int i = 0; i < 400; ++i) other.Record(kRecent, 5, 2);
  EXPECT_GT(other.Acceptance(kRecent, 2), 0.99);
  EXPECT_LT(other.Acceptance(kRecent, 3), 0.01);
  EXPECT_DOUBLE_EQ(other.Acceptance(kRecent, 4), 0.5);
  EXPECT_EQ(other.Choose(kRecent, 5, [](int r) { return Linear(r, 0.1); }), 2);
}

TEST(DraftLengthRule, LongAndShortMatchesAreLearntApart) {
  DraftLengthRule rule;
  const DraftKind short_match{DraftSource::kPromptLookup, 2};
  const DraftKind long_match{DraftSource::kPromptLookup, 12};
  for (int i = 0; i < 400; ++i) {
    rule.Record(short_match, 4, 0);
    rule.Record(long_match, 4, 4);
  }
  EXPECT_LT(rule.Acceptance(short_match, 1), 0.01);
  EXPECT_GT(rule.Acceptance(long_match, 1), 0.99);
  // 11 is in the same class as 12; 3 is not in 2's.
  EXPECT_GT(rule.Acceptance({DraftSource::kPromptLookup, 11}, 1), 0.99);
  EXPECT_DOUBLE_EQ(rule.Acceptance({DraftSource::kPromptLookup, 3}, 1), 0.5);
  auto cost = [](int r) { return Linear(r, 0.3); };
  EXPECT_EQ(rule.Choose(short_match, 4, cost), 0);
  EXPECT_EQ(rule.Choose(long_match, 4, cost), 4);
}

TEST(DraftLengthRule, BreakingEvenIsNotEnough) {
  DraftLengthRule rule;
  // a_1 = 0.5 (the prior) against a row costing 0.5: rate(1) = 1.5 / 1.5,
  // exactly plain decoding's; the rule wants kMinGain more.
  EXPECT_EQ(rule.Choose(kRecycling, 1, [](int r) { return Linear(r, 0.5); }), 0);
  EXPECT_EQ(rule.Choose(kRecycling, 1, [](int r) { return Linear(r, 0.45); }), 1);
}

TEST(DraftLengthRule, ACallSharedWithOtherSequencesDraftsLess) {
  DraftLengthRule rule;
  for (int i = 0; i < 400; ++i) rule.Record(kRecycling, 1, 0);
  for (int i = 0; i < 400; ++i) {  // a_1 -> 0.6: accepted 3 times in 5
    rule.Record(kRecycling, 1, i % 5 < 3 ? 1 : 0);
  }
  const double a1 = rule.Acceptance(kRecycling, 1);
  ASSERT_NEAR(a1, 0.6, 0.05);
  auto cost = [](int r) { return Linear(r, 0.3); };
  // Alone: (1 + a1) / 1.3 > 1, one draft pays.
  EXPECT_EQ(rule.Choose(kRecycling, 1, cost), 1);
  EXPECT_EQ(rule.Choose(kRecycling, 1, cost, CallShare{}), 1);
  // Five other sequences, a row and a token each: (6 + a1) / cost(7) =
  // 6.6 / 2.8 < 6 / cost(6) = 6 / 2.5, so the draft would slow the batch.
  EXPECT_EQ(rule.Choose(kRecycling, 1, cost, CallShare{5, 5.0}), 0);
  // A long prefill chunk in the call (many rows, no tokens) makes a row
  // nearly free at the margin: the draft goes out.
  EXPECT_EQ(rule.Choose(kRecycling, 1, cost, CallShare{60, 0.0}), 1);
}

}  // namespace
}  // namespace specline::scheduler
