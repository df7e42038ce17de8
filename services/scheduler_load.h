// The scheduler's load as the gateway last polled it: its GetStats answer
// (running and waiting requests, the KV block pool), which the gateway's
// readiness probe fetches every 250 ms anyway (gateway_server.cc). The
// routers' metrics and /get_server_info read this copy rather than asking
// the scheduler per scrape: an endpoint picker scrapes every pod every
// 50 ms, several routers may, and the scheduler's lock is the engine's.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

#include "specline/internal/scheduler.pb.h"

namespace specline {

class SchedulerLoad {
 public:
  void Update(const internal::SchedulerStats& stats);
  // The scheduler did not answer: its numbers are not known any more.
  void Clear();
  // The last answer; nullopt before the first and after a failed poll.
  std::optional<internal::SchedulerStats> Latest() const;

 private:
  mutable std::mutex mu_;
  std::optional<internal::SchedulerStats> latest_;
};

// A stage's KV cache as admission counts it (every stage has the same).
struct KvBlockPool {
  int block_size = 0;      // positions per block
  int64_t num_blocks = 0;  // blocks per stage
};
// nullopt until the pipeline first came up (the capacity is learnt then).
std::optional<KvBlockPool> KvBlockPoolOf(const internal::SchedulerStats& stats);

// The share (0-1) of the KV pool admission has handed out: reserved by
// admitted requests, or cached and held by one. Cached blocks nobody holds
// count as free, since admission evicts them when it needs room (as
// vLLM's block pool counts them).
double KvCacheUsage(const internal::SchedulerStats& stats);

}  // namespace specline
