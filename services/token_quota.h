// The gateway's tokens-per-minute quota, one token bucket per principal
// (--max-tokens-per-minute-per-principal). A bucket holds at most a
// minute's worth of tokens and refills at limit / 60 per second, so a
// principal may burst a minute's worth and then sustains the limit.
//
// A request takes prompt + max_tokens when it is admitted (its worst case:
// the gateway cannot know how many tokens it will generate) and gives back
// what it did not generate when it ends, so what a principal is charged is
// prompt + completion tokens, and its running requests can never overshoot.
// Time is passed in, so the arithmetic is tested without waiting.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace specline {

class TokenQuota {
 public:
  using Clock = std::chrono::steady_clock;

  // tokens_per_minute <= 0: no quota (every Take succeeds).
  explicit TokenQuota(int64_t tokens_per_minute) : limit_(tokens_per_minute) {}

  int64_t tokens_per_minute() const { return limit_; }
  bool enabled() const { return limit_ > 0; }

  struct Decision {
    bool ok = true;
    // Refused: whole seconds until the bucket holds `tokens` (>= 1), or 0
    // when it never will (more than a minute's worth).
    int64_t retry_after_seconds = 0;
  };
  // Takes `tokens` from `principal`'s bucket at `now`, or refuses them.
  Decision Take(const std::string& principal, int64_t tokens, Clock::time_point now);
  // Gives back tokens taken but not used (never above a full bucket).
  void Return(const std::string& principal, int64_t tokens, Clock::time_point now);

 private:
  struct Bucket {
    double tokens = 0;
    Clock::time_point updated;
  };
  // The principal's bucket, refilled up to `now` (a new one is full).
  Bucket& RefilledLocked(const std::string& principal, Clock::time_point now);

  const int64_t limit_;
  std::mutex mu_;
  // Principals come from the token file, so this map is bounded by it.
  std::map<std::string, Bucket> buckets_;
};

}  // namespace specline
