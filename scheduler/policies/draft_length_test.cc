// DraftLengthRule: the draft count that maximises expected tokens per unit
// of time, against a hand computation; nothing when no count beats plain
// decoding; the acceptance estimates it learns per source and position.
#include "scheduler/policies/draft_length.h"

#include <gtest/gtest.h>

namespace specline::scheduler {
namespace {

double Linear(int rows, double extra) { return 1.0 + extra * (rows - 1); }

TEST(DraftLengthRule, FreeRowsDraftEverythingDearRowsNothing) {
  DraftLengthRule rule;  // every a_j at the prior, 0.5
  // Flat curve (a GPU): every draft adds expected tokens for free.
  EXPECT_EQ(rule.Choose(DraftSource::kTokenRecycling, 6, [](int) { return 1.0; }), 6);
  // Each row as dear as a call: rate(k) = (2 - 0.5^k) / (k + 1) < 1.
  EXPECT_EQ(rule.Choose(DraftSource::kTokenRecycling, 6, [](int r) { return double(r); }), 0);
  EXPECT_EQ(rule.Choose(DraftSource::kTokenRecycling, 0, [](int) { return 1.0; }), 0);
}

TEST(DraftLengthRule, ChoosesTheBestRateByHand) {
  DraftLengthRule rule;
  // Teach the own-text source a high acceptance: a_j -> 1 for the first 4.
  for (int i = 0; i < 400; ++i) rule.Record(DraftSource::kPromptLookup, 4, 4);
  for (int j = 1; j <= 4; ++j) EXPECT_GT(rule.Acceptance(DraftSource::kPromptLookup, j), 0.99) << j;
  // Position 5 never saw a verification: still the prior.
  EXPECT_DOUBLE_EQ(rule.Acceptance(DraftSource::kPromptLookup, 5), 0.5);
  // Other sources are untouched.
  EXPECT_DOUBLE_EQ(rule.Acceptance(DraftSource::kTokenRecycling, 1), 0.5);
  // Cost 1 + 0.3 (rows - 1): rate(4) ~ 5 / 2.2 = 2.27; rate(5) ~ 5.5 / 2.5 =
  // 2.2; rate(6) ~ 5.75 / 2.8: four drafts.
  auto cost = [](int r) { return Linear(r, 0.3); };
  EXPECT_EQ(rule.Choose(DraftSource::kPromptLookup, 8, cost), 4);
  EXPECT_EQ(rule.Choose(DraftSource::kPromptLookup, 2, cost), 2);  // no more are available
}

TEST(DraftLengthRule, LearnsRejectionsAtTheFirstWrongDraft) {
  DraftLengthRule rule;
  // Drafts of 3, the first always rejected: a_1 -> 0; positions 2 and 3
  // saw nothing (their drafts were never judged).
  for (int i = 0; i < 400; ++i) rule.Record(DraftSource::kTokenRecycling, 3, 0);
  EXPECT_LT(rule.Acceptance(DraftSource::kTokenRecycling, 1), 0.01);
  EXPECT_DOUBLE_EQ(rule.Acceptance(DraftSource::kTokenRecycling, 2), 0.5);
  // With a_1 near 0 even a cheap curve drafts nothing.
  EXPECT_EQ(rule.Choose(DraftSource::kTokenRecycling, 4, [](int r) { return Linear(r, 0.05); }), 0);
  // Accepted twice, rejected at the third: a_1, a_2 up, a_3 down.
  DraftLengthRule other;
  for (int i = 0; i < 400; ++i) other.Record(DraftSource::kRecentRequests, 5, 2);
  EXPECT_GT(other.Acceptance(DraftSource::kRecentRequests, 2), 0.99);
  EXPECT_LT(other.Acceptance(DraftSource::kRecentRequests, 3), 0.01);
  EXPECT_DOUBLE_EQ(other.Acceptance(DraftSource::kRecentRequests, 4), 0.5);
  EXPECT_EQ(other.Choose(DraftSource::kRecentRequests, 5, [](int r) { return Linear(r, 0.1); }), 2);
}

TEST(DraftLengthRule, ACallSharedWithOtherSequencesDraftsLess) {
  DraftLengthRule rule;
  for (int i = 0; i < 400; ++i) rule.Record(DraftSource::kTokenRecycling, 1, 0);
  for (int i = 0; i < 400; ++i) {  // a_1 -> 0.6: accepted 3 times in 5
    rule.Record(DraftSource::kTokenRecycling, 1, i % 5 < 3 ? 1 : 0);
  }
  const double a1 = rule.Acceptance(DraftSource::kTokenRecycling, 1);
  ASSERT_NEAR(a1, 0.6, 0.05);
  auto cost = [](int r) { return Linear(r, 0.3); };
  // Alone: (1 + a1) / 1.3 > 1, one draft pays.
  EXPECT_EQ(rule.Choose(DraftSource::kTokenRecycling, 1, cost), 1);
  EXPECT_EQ(rule.Choose(DraftSource::kTokenRecycling, 1, cost, CallShare{}), 1);
  // Five other sequences, a row and a token each: (6 + a1) / cost(7) =
  // 6.6 / 2.8 < 6 / cost(6) = 6 / 2.5, so the draft would slow the batch.
  EXPECT_EQ(rule.Choose(DraftSource::kTokenRecycling, 1, cost, CallShare{5, 5.0}), 0);
  // A long prefill chunk in the call (many rows, no tokens) makes a row
  // nearly free at the margin: the draft goes out.
  EXPECT_EQ(rule.Choose(DraftSource::kTokenRecycling, 1, cost, CallShare{60, 0.0}), 1);
}

}  // namespace
}  // namespace specline::scheduler
