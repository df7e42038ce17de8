// CallCostCurve: the prior until the recent calls give a slope, the fitted
// line through calls of several sizes, following a change of load, the
// calls it ignores, and never a cost below a one-row call's.
#include "scheduler/call_cost_curve.h"

#include <gtest/gtest.h>

namespace specline::scheduler {
namespace {

TEST(CallCostCurve, UsesThePriorUntilMeasured) {
  CallCostCurve c;
  EXPECT_DOUBLE_EQ(c.Relative(1), 1.0);
  EXPECT_DOUBLE_EQ(c.Relative(5), 1.0 + 4 * CallCostCurve::kPriorExtraRow);
  // Many calls, all of 4 rows: no slope can be told from them.
  for (int i = 0; i < 100; ++i) c.Observe(4, 0.020);
  EXPECT_DOUBLE_EQ(c.Relative(5), 1.0 + 4 * CallCostCurve::kPriorExtraRow);
  EXPECT_EQ(c.calls(), 100);
}

TEST(CallCostCurve, FitsTheLineThroughCallsOfSeveralSizes) {
  CallCostCurve c;
  // T(m) = 10 ms + 3 ms per row, calls of 2, 4 and 6 rows (never one row).
  for (int i = 0; i < 30; ++i) {
    for (int m : {2, 4, 6}) c.Observe(m, 0.010 + 0.003 * m);
  }
  const double one = 0.013;
  EXPECT_NEAR(c.Relative(4), 0.022 / one, 1e-9);
  EXPECT_NEAR(c.Relative(2), 0.016 / one, 1e-9);
  EXPECT_NEAR(c.Relative(40), 0.130 / one, 1e-9);  // far beyond: the same line
  EXPECT_DOUBLE_EQ(c.Relative(1), 1.0);
}

TEST(CallCostCurve, FollowsAChangeOfLoad) {
  CallCostCurve c;
  for (int i = 0; i < 40; ++i) {
    c.Observe(1, 0.010);
    c.Observe(2, 0.020);  // each row as dear as a call
  }
  EXPECT_NEAR(c.Relative(2), 2.0, 1e-9);
  for (int i = 0; i < 400; ++i) {
    c.Observe(1, 0.010);
    c.Observe(2, 0.011);  // rows nearly free now
  }
  EXPECT_NEAR(c.Relative(2), 1.1, 0.01);
}

TEST(CallCostCurve, IgnoresLongCallsAndNonsenseAndNeverGoesBelowOne) {
  CallCostCurve c;
  c.Observe(CallCostCurve::kMaxRows + 1, 5.0);  // a prefill chunk
  c.Observe(2, -1.0);
  c.Observe(0, 1.0);
  EXPECT_EQ(c.calls(), 0);
  // A curve measured slightly falling (noise) is flat: 1.
  for (int i = 0; i < 20; ++i) {
    c.Observe(1, 0.010);
    c.Observe(8, 0.0095);
  }
  EXPECT_DOUBLE_EQ(c.Relative(8), 1.0);
}

}  // namespace
}  // namespace specline::scheduler
