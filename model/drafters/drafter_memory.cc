#include "model/drafters/drafter_memory.h"

#include <algorithm>
#include <iterator>

namespace specline {

std::shared_ptr<DrafterMemory> DrafterMemoryScopes::For(std::string_view scope) {
  // Debian's Abseil has its own string_view, which the map hashes.
  const absl::string_view key(scope.data(), scope.size());
  std::lock_guard lock(mu_);
  auto it = by_scope_.find(key);
  if (it != by_scope_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru);
    return it->second.memory;
  }
  auto memory = std::make_shared<DrafterMemory>(limits_.vocab_size, limits_.k,
                                                limits_.recent_tokens_per_scope);
  lru_.emplace_back(scope);
  by_scope_.emplace(key, Entry{memory, std::prev(lru_.end())});
  TrimLocked(memory.get());
  return memory;
}

void DrafterMemoryScopes::Trim(const DrafterMemory* keep) {
  std::lock_guard lock(mu_);
  TrimLocked(keep);
}

size_t DrafterMemoryScopes::BytesLocked() const {
  size_t total = 0;
  for (const auto& [scope, entry] : by_scope_) total += entry.memory->bytes();
  return total;
}

void DrafterMemoryScopes::TrimLocked(const DrafterMemory* keep) {
  // The sum is recomputed, not tracked: a recent index grows under its own
  // lock, and this runs once per new scope or finished request.
  size_t total = BytesLocked();
  auto victim = lru_.begin();
  while (total > limits_.max_bytes && victim != lru_.end()) {
    auto entry = by_scope_.find(*victim);
    if (entry->second.memory.get() == keep) {
      ++victim;
      continue;
    }
    total -= std::min(total, entry->second.memory->bytes());
    by_scope_.erase(entry);
    victim = lru_.erase(victim);
    ++dropped_;
  }
}

size_t DrafterMemoryScopes::scopes() const {
  std::lock_guard lock(mu_);
  return by_scope_.size();
}

size_t DrafterMemoryScopes::bytes() const {
  std::lock_guard lock(mu_);
  return BytesLocked();
}

int64_t DrafterMemoryScopes::dropped_scopes() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

}  // namespace specline
