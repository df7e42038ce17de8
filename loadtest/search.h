// --find-max: the highest open-loop rate whose SLO attainment (the fraction
// of requests meeting both SLOs) reaches a target. Doubling from a start
// rate until a rate fails (or `max_doublings`), then `bisections` halvings
// of the interval between the last passing and the first failing rate.
#pragma once

#include <functional>
#include <vector>

namespace specline::loadtest {

struct SearchResult {
  double max_rate = 0;  // highest rate that passed; 0 if even the start failed
  std::vector<double> rates;  // every rate tried, in order
  std::vector<double> attainments;
};

// `attainment(rate)` runs the load at `rate` and returns its attainment.
SearchResult FindMaxRate(const std::function<double(double)>& attainment, double start_rate,
                         double target, int max_doublings = 8, int bisections = 4);

}  // namespace specline::loadtest
