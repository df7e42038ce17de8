// Drives one run: open loop (requests sent at precomputed absolute times,
// each on its own thread, however many are in flight) or closed loop
// (`concurrency` workers, each sending its next request when the previous
// one finished). The actual call is a SendFn, so the scheduling is tested
// without a server.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "loadtest/stats.h"
#include "loadtest/workload.h"

namespace specline::loadtest {

using Clock = std::chrono::steady_clock;

struct RunConfig {
  double rate = 0;        // > 0: open loop at this many requests/s
  double burstiness = 1;  // open loop: gamma shape of the gaps (1 = Poisson)
  int concurrency = 0;    // rate == 0: closed loop with this many workers
  double ramp_up = 0;     // seconds: open loop ramps the rate linearly;
                          // closed loop starts its workers evenly over it
  double duration = 0;    // seconds: no request starts after this (0 = none)
  int requests = 0;       // requests to send (0 = until duration)
  uint64_t seed = 0;
};

// Sends item `index` (work items are used round-robin) and fills a record;
// `run_start` is the zero of the record's times. Must be thread-safe.
using SendFn = std::function<RequestRecord(int index, const WorkItem& item, Clock::time_point run_start)>;

inline double Seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// What every sender records the same way. A message carrying `tokens`
// tokens arrived at `now`: the first sets TTFT, later ones add an ITL gap
// (one per message, whatever `tokens` is). `last` is the previous arrival.
void RecordMessage(RequestRecord& r, Clock::time_point t0, Clock::time_point run_start,
                   Clock::time_point now, int tokens, Clock::time_point* last);
// The request ended at `end`: its end, e2e and TPOT.
void FinishRecord(RequestRecord& r, Clock::time_point t0, Clock::time_point run_start,
                  Clock::time_point end);

// Runs to completion (waits for every request sent) and returns the records
// in sending order.
std::vector<RequestRecord> Run(const RunConfig& config, const std::vector<WorkItem>& items,
                               const SendFn& send);

}  // namespace specline::loadtest
