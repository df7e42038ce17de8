#include "services/token_quota.h"

#include <algorithm>
#include <cmath>

namespace specline {

TokenQuota::Bucket& TokenQuota::RefilledLocked(const std::string& principal,
                                               Clock::time_point now) {
  auto [it, fresh] = buckets_.try_emplace(principal);
  Bucket& b = it->second;
  if (fresh) {
    b.tokens = static_cast<double>(limit_);
  } else if (now > b.updated) {
    const double seconds = std::chrono::duration<double>(now - b.updated).count();
    b.tokens = std::min<double>(static_cast<double>(limit_), b.tokens + seconds * limit_ / 60.0);
  }
  b.updated = std::max(b.updated, now);
  return b;
}

TokenQuota::Decision TokenQuota::Take(const std::string& principal, int64_t tokens,
                                      Clock::time_point now) {
  if (!enabled()) return {};
  if (tokens > limit_) return {false, 0};
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = RefilledLocked(principal, now);
  if (b.tokens >= static_cast<double>(tokens)) {
    b.tokens -= static_cast<double>(tokens);
    return {};
  }
  const double missing = static_cast<double>(tokens) - b.tokens;
  const auto seconds = static_cast<int64_t>(std::ceil(missing * 60.0 / static_cast<double>(limit_)));
  return {false, std::max<int64_t>(seconds, 1)};
}

void TokenQuota::Return(const std::string& principal, int64_t tokens, Clock::time_point now) {
  if (!enabled() || tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = RefilledLocked(principal, now);
  b.tokens = std::min<double>(static_cast<double>(limit_), b.tokens + static_cast<double>(tokens));
}

}  // namespace specline
