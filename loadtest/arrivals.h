// Arrival schedules for the open loop: absolute send times (seconds from the
// start of a run) for Poisson or gamma-distributed inter-arrival gaps, with
// an optional linear ramp-up of the rate.
#pragma once

#include <cstdint>
#include <vector>

namespace specline::loadtest {

struct ArrivalOptions {
  double rate = 1;        // requests per second once ramped up (> 0)
  double burstiness = 1;  // gamma shape k: 1 = Poisson; < 1 burstier; > 1 smoother
  double ramp_up = 0;     // seconds over which the rate grows linearly from 0
  uint64_t seed = 0;
};

// Inter-arrival gaps of a unit-mean renewal process: gamma(k, 1/k) (so the
// mean is 1 and the coefficient of variation 1/sqrt(k); k = 1 is the
// exponential, i.e. Poisson arrivals). Used by ArrivalTimes; exposed for tests.
std::vector<double> UnitGaps(int n, double burstiness, uint64_t seed);

// Absolute arrival times, ascending: at most `max_requests` (0 = no limit)
// and none at or after `duration` seconds (0 = no limit; one of the two must
// be set). The process runs at unit rate in "expected arrivals" time and is
// mapped to wall time through the inverse of the cumulative rate
// Lambda(t) = rate * t^2 / (2 R) for t < R (ramp-up R), then linear, so
// the ramp never accumulates drift.
std::vector<double> ArrivalTimes(const ArrivalOptions& options, int max_requests, double duration);

}  // namespace specline::loadtest
