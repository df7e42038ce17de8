#include "services/scheduler_load.h"

#include <algorithm>

namespace specline {

void SchedulerLoad::Update(const internal::SchedulerStats& stats) {
  std::lock_guard<std::mutex> lock(mu_);
  latest_ = stats;
}

void SchedulerLoad::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  latest_.reset();
}

std::optional<internal::SchedulerStats> SchedulerLoad::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

std::optional<KvBlockPool> KvBlockPoolOf(const internal::SchedulerStats& stats) {
  if (stats.kv_capacity_tokens() <= 0 || stats.kv_block_size() <= 0) return std::nullopt;
  return KvBlockPool{stats.kv_block_size(), stats.kv_capacity_tokens() / stats.kv_block_size()};
}

double KvCacheUsage(const internal::SchedulerStats& stats) {
  const int64_t capacity = stats.kv_capacity_tokens();
  if (capacity <= 0) return 0;
  const double used = static_cast<double>(capacity - stats.kv_free_tokens()) / capacity;
  return std::clamp(used, 0.0, 1.0);
}

}  // namespace specline
