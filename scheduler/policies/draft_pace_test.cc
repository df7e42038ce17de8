// DraftPace: the acceptance pipeline speculation needs, from the measured
// gaps between a sequence's tokens, against a hand computation.
#include "scheduler/policies/draft_pace.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace specline::scheduler {
namespace {

void Feed(DraftPace& pace, double plain, double accepted, double fresh, int n) {
  for (int i = 0; i < n; ++i) {
    pace.Observe(TokenGap::kPlain, plain);
    pace.Observe(TokenGap::kAccepted, accepted);
    pace.Observe(TokenGap::kFresh, fresh);
  }
}

TEST(DraftPace, UnknownUntilEveryGapIsMeasured) {
  DraftPace pace;
  EXPECT_FALSE(pace.BreakEven().has_value());
  Feed(pace, 4, 1, 4.2, DraftPace::kMinSamples - 1);
  EXPECT_FALSE(pace.BreakEven().has_value());
  // Plain and accepted gaps alone do not decide it either.
  for (int i = 0; i < 50; ++i) {
    pace.Observe(TokenGap::kPlain, 4);
    pace.Observe(TokenGap::kAccepted, 1);
  }
  EXPECT_FALSE(pace.BreakEven().has_value());
  pace.Observe(TokenGap::kFresh, 4.2);
  EXPECT_TRUE(pace.BreakEven().has_value());
}

TEST(DraftPace, BreakEvenByHand) {
  // Four stages on four devices: an accepted draft's successor comes one
  // stage later, a fresh row's a little after a plain token's.
  DraftPace gpu;
  Feed(gpu, 4, 1, 4.2, 20);
  const double plain = 4 / (1 + DraftPace::kMinGain);
  EXPECT_NEAR(*gpu.BreakEven(), (4.2 - plain) / (4.2 - 1), 1e-9);
  EXPECT_LT(*gpu.BreakEven(), 0.1);
  // Two stage processes on 2 busy cores, the drafter's work in the way of
  // fresh rows: an accepted draft saves little.
  DraftPace cpu;
  Feed(cpu, 10, 8, 12, 20);
  EXPECT_NEAR(*cpu.BreakEven(), (12 - 10 / (1 + DraftPace::kMinGain)) / (12 - 8.0), 1e-9);
  EXPECT_GT(*cpu.BreakEven(), 0.5);
}

TEST(DraftPace, NeverAndAlways) {
  // One stage: an accepted draft's successor waits as long as a plain
  // token's, so no acceptance pays.
  DraftPace one_stage;
  Feed(one_stage, 10, 10, 12, 20);
  EXPECT_GT(*one_stage.BreakEven(), 1.0);
  DraftPace worse;
  Feed(worse, 10, 12, 11, 20);
  EXPECT_EQ(*worse.BreakEven(), std::numeric_limits<double>::infinity());
  // A fresh row no slower than a plain token's: even failed drafts cost
  // nothing.
  DraftPace free_flush;
  Feed(free_flush, 10, 3, 9, 20);
  EXPECT_EQ(*free_flush.BreakEven(), 0.0);
}

TEST(DraftPace, FollowsTheRecentGapsAndIgnoresBadOnes) {
  DraftPace pace;
  for (int i = 0; i < 200; ++i) pace.Observe(TokenGap::kPlain, 1.0);
  EXPECT_DOUBLE_EQ(pace.Mean(TokenGap::kPlain), 1.0);
  for (int i = 0; i < 200; ++i) pace.Observe(TokenGap::kPlain, 2.0);
  EXPECT_NEAR(pace.Mean(TokenGap::kPlain), 2.0, 1e-3);
  // A stretched gap counts for at most kMaxRatio of the mean.
  pace.Observe(TokenGap::kPlain, 1000.0);
  EXPECT_NEAR(pace.Mean(TokenGap::kPlain), 2.0 + DraftPace::kRate * (DraftPace::kMaxRatio - 1) * 2.0,
              1e-3);
  for (int i = 0; i < 200; ++i) pace.Observe(TokenGap::kPlain, 2.0);
  pace.Observe(TokenGap::kPlain, -1.0);
  pace.Observe(TokenGap::kPlain, std::nan(""));
  EXPECT_EQ(pace.Samples(TokenGap::kPlain), 601);
  EXPECT_NEAR(pace.Mean(TokenGap::kPlain), 2.0, 1e-3);
}

}  // namespace
}  // namespace specline::scheduler
