#include "services/stop_matcher.h"

#include <algorithm>

namespace specline {

std::string StopMatcher::Push(const std::string& text, bool* stopped) {
  *stopped = false;
  if (stops_.empty()) return text;
  pending_ += text;
  // Earliest stop string wins (two may overlap in the same chunk); of two
  // starting at the same place, the first listed.
  size_t first = std::string::npos;
  const std::string* matched = nullptr;
  for (const std::string& s : stops_) {
    const size_t at = pending_.find(s);
    if (at < first) {
      first = at;
      matched = &s;
    }
  }
  if (first != std::string::npos) {
    *stopped = true;
    matched_ = *matched;
    std::string out = pending_.substr(0, include_stop_ ? first + matched->size() : first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace specline
