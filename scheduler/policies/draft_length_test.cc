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
  // Teach the own-text source: drafts of 4, all accepted but the 4th in
  // three of four, so a_1..a_3 -> 1 and a_4 -> 0.25.
  for (int i = 0; i < 400; ++i) rule.Record(kLookup, 4, i % 4 == 0 ? 4 : 3);
  for (int j = 1; j <= 3; ++j) EXPECT_GT(rule.Acceptance(kLookup, j), 0.99) << j;
  EXPECT_NEAR(rule.Acceptance(kLookup, 4), 0.25, 0.05);
  // Other sources are untouched.
  EXPECT_DOUBLE_EQ(rule.Acceptance(kRecycling, 1), 0.5);
  // Cost 1 + 0.3 (rows - 1): rate(3) ~ 4 / 1.9 = 2.11; rate(4) ~ 4.25 / 2.2
  // = 1.93: three drafts.
  auto cost = [](int r) { return Linear(r, 0.3); };
  EXPECT_EQ(rule.Choose(kLookup, 8, cost), 3);
  EXPECT_EQ(rule.Choose(kLookup, 2, cost), 2);  // no more are available
}

TEST(DraftLengthRule, UnjudgedPositionsTakeTheEstimateBeforeThem) {
  DraftLengthRule rule;
  // Drafts of 2, always both accepted: positions 3 and up were never
  // judged, and take position 2's estimate, not the prior.
  for (int i = 0; i < 400; ++i) rule.Record(kLookup, 2, 2);
  EXPECT_GT(rule.Acceptance(kLookup, 5), 0.99);
  // So the rule tries longer drafts where they are cheap enough, and learns
  // the next positions from them.
  EXPECT_EQ(rule.Choose(kLookup, 8, [](int r) { return Linear(r, 0.3); }), 8);
}

TEST(DraftLengthRule, LearnsRejectionsAtTheFirstWrongDraft) {
  DraftLengthRule rule;
  // Drafts of 3, the first always rejected: a_1 -> 0; positions 2 and 3
  // were never judged, and take a_1.
  for (int i = 0; i < 400; ++i) rule.Record(kRecycling, 3, 0);
  EXPECT_LT(rule.Acceptance(kRecycling, 1), 0.01);
  EXPECT_LT(rule.Acceptance(kRecycling, 2), 0.01);
  // With a_1 near 0 even a cheap curve drafts nothing.
  EXPECT_EQ(rule.Choose(kRecycling, 4, [](int r) { return Linear(r, 0.05); }), 0);
  // Accepted twice, rejected at the third: a_1, a_2 up, a_3 down (and the
  // unjudged a_4 with it).
  DraftLengthRule other;
  for (int i = 0; i < 400; ++i) other.Record(kRecent, 5, 2);
  EXPECT_GT(other.Acceptance(kRecent, 2), 0.99);
  EXPECT_LT(other.Acceptance(kRecent, 3), 0.01);
  EXPECT_LT(other.Acceptance(kRecent, 4), 0.01);
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
  // 11 is in the same class as 12. 3 is in neither's: with no samples of
  // its own it gets the source's pooled estimate (both kinds' verifications,
  // the last one a rejection: just under a half).
  EXPECT_GT(rule.Acceptance({DraftSource::kPromptLookup, 11}, 1), 0.99);
  const double pooled = rule.Acceptance({DraftSource::kPromptLookup, 3}, 1);
  EXPECT_GT(pooled, 0.3);
  EXPECT_LT(pooled, 0.7);
  auto cost = [](int r) { return Linear(r, 0.3); };
  EXPECT_EQ(rule.Choose(short_match, 4, cost), 0);
  EXPECT_EQ(rule.Choose(long_match, 4, cost), 4);
}

TEST(DraftLengthRule, ANewClassStartsFromItsSourcesEstimate) {
  DraftLengthRule rule;
  // The own-text source learnt to be right (at match 5)...
  for (int i = 0; i < 200; ++i) rule.Record({DraftSource::kPromptLookup, 5}, 2, 2);
  // ...so a first 12-token match starts there, not at the prior, and keeps
  // that until its class has samples of its own.
  const DraftKind first_long{DraftSource::kPromptLookup, 12};
  EXPECT_GT(rule.Acceptance(first_long, 1), 0.99);
  for (int i = 0; i < 7; ++i) rule.Record(first_long, 2, 0);
  EXPECT_LT(rule.Acceptance(first_long, 1), 0.99);  // pooled: 7 rejections in
  EXPECT_GT(rule.Acceptance(first_long, 1), 0.5);
  rule.Record(first_long, 2, 0);  // the 8th: the class's own estimate now
  EXPECT_LT(rule.Acceptance(first_long, 1), 0.5);
  // Other sources are untouched.
  EXPECT_DOUBLE_EQ(rule.Acceptance(kRecent, 1), 0.5);
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

// PTP's auxiliary rows: the first only checks the token the call decides
// anyway, and the rows count only if every proposal the call verifies is
// accepted.
TEST(DraftLengthRule, CheckedDraftsYieldNothingAndLiveScalesTheRest) {
  DraftLengthRule rule;
  const DraftKind aux{};
  for (int i = 0; i < 400; ++i) rule.Record(aux, 4, 4);  // every a_j -> 1
  auto cost = [](int r) { return Linear(r, 0.3); };
  // Unchecked: rate(4) = 5 / 1.9. Checked: E(k) = k, rate(k) = k / (1 +
  // 0.3 k), best at 4 (1.82), and one row alone (the check) never pays.
  EXPECT_EQ(rule.Choose(aux, 4, cost), 4);
  EXPECT_EQ(rule.Choose(aux, 4, cost, {}, /*checked=*/1), 4);
  EXPECT_EQ(rule.Choose(aux, 1, [](int) { return 1.0; }, {}, /*checked=*/1), 0);
  // The proposals before them hold with 0.3: E(4) = 1 + 0.3 * 3 = 1.9,
  // under cost(5) = 2.2 (plain decoding's 1), so none go out; on a flat
  // curve they still pay.
  EXPECT_EQ(rule.Choose(aux, 4, cost, {}, 1, /*live=*/0.3), 0);
  EXPECT_EQ(rule.Choose(aux, 4, [](int) { return 1.0; }, {}, 1, 0.3), 4);
}

}  // namespace
}  // namespace specline::scheduler
