// CallCostCurve: the prior before measurements, measured ratios once each
// row count has enough calls, interpolation between measured counts, and
// the calls it ignores.
#include "scheduler/call_cost_curve.h"

#include <gtest/gtest.h>

namespace specline::scheduler {
namespace {

TEST(CallCostCurve, UsesThePriorUntilMeasured) {
  CallCostCurve c;
  EXPECT_DOUBLE_EQ(c.Relative(1), 1.0);
  EXPECT_DOUBLE_EQ(c.Relative(5), 1.0 + 4 * CallCostCurve::kPriorExtraRow);
  for (int i = 0; i < CallCostCurve::kMinSamples - 1; ++i) c.Observe(1, 0.010);
  EXPECT_DOUBLE_EQ(c.Relative(5), 1.0 + 4 * CallCostCurve::kPriorExtraRow);  // too few
}

TEST(CallCostCurve, MeasuredRatiosAndInterpolation) {
  CallCostCurve c;
  for (int i = 0; i < 10; ++i) {
    c.Observe(1, 0.010);
    c.Observe(3, 0.016);
    c.Observe(5, 0.024);
  }
  EXPECT_NEAR(c.Relative(3), 1.6, 1e-9);
  EXPECT_NEAR(c.Relative(5), 2.4, 1e-9);
  EXPECT_NEAR(c.Relative(4), 2.0, 1e-9);  // halfway between 3 and 5
  EXPECT_NEAR(c.Relative(2), 1.3, 1e-9);  // between 1 and 3
  // Beyond the last measured count: its time plus the mean measured slope,
  // (2.4 - 1) / 4 = 0.35 per row.
  EXPECT_NEAR(c.Relative(7), 2.4 + 2 * 0.35, 1e-9);
  // Past the longest call it measures too (a batch larger than kMaxRows).
  EXPECT_NEAR(c.Relative(CallCostCurve::kMaxRows + 6), 2.4 + (CallCostCurve::kMaxRows + 1) * 0.35,
              1e-9);
  EXPECT_EQ(c.samples(3), 10);
}

TEST(CallCostCurve, OnlyTheOneRowCallMeasuredExtendsAtThePrior) {
  CallCostCurve c;
  for (int i = 0; i < 10; ++i) c.Observe(1, 0.010);
  EXPECT_NEAR(c.Relative(5), 1.0 + 4 * CallCostCurve::kPriorExtraRow, 1e-9);
}

TEST(CallCostCurve, TheLongestCallItKeepsIsMeasuredAndUsedBeyond) {
  CallCostCurve c;
  for (int i = 0; i < 10; ++i) {
    c.Observe(1, 0.010);
    c.Observe(CallCostCurve::kMaxRows, 0.010 * (1 + 0.2 * (CallCostCurve::kMaxRows - 1)));
  }
  EXPECT_NEAR(c.Relative(CallCostCurve::kMaxRows), 1 + 0.2 * (CallCostCurve::kMaxRows - 1), 1e-9);
  EXPECT_NEAR(c.Relative(CallCostCurve::kMaxRows + 10), 1 + 0.2 * (CallCostCurve::kMaxRows + 9),
              1e-9);
  EXPECT_NEAR(c.Relative(11), 1 + 0.2 * 10, 1e-9);  // interpolated
}

TEST(CallCostCurve, IgnoresLongCallsAndNonsenseAndNeverGoesBelowOne) {
  CallCostCurve c;
  c.Observe(CallCostCurve::kMaxRows + 1, 5.0);  // a prefill chunk
  c.Observe(2, -1.0);
  c.Observe(0, 1.0);
  for (int r = 1; r <= CallCostCurve::kMaxRows; ++r) EXPECT_EQ(c.samples(r), 0) << r;
  // A flat curve measured slightly below the one-row time (noise) is 1.
  for (int i = 0; i < 10; ++i) {
    c.Observe(1, 0.010);
    c.Observe(8, 0.0095);
  }
  EXPECT_DOUBLE_EQ(c.Relative(8), 1.0);
}

TEST(CallCostCurve, FollowsDrift) {
  CallCostCurve c;
  for (int i = 0; i < 20; ++i) {
    c.Observe(1, 0.010);
    c.Observe(2, 0.020);
  }
  EXPECT_NEAR(c.Relative(2), 2.0, 1e-9);
  for (int i = 0; i < 200; ++i) {
    c.Observe(1, 0.010);
    c.Observe(2, 0.011);
  }
  EXPECT_NEAR(c.Relative(2), 1.1, 0.01);
}

}  // namespace
}  // namespace specline::scheduler
