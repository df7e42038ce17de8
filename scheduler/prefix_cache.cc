#include "scheduler/prefix_cache.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "absl/types/span.h"

namespace specline::scheduler {

uint64_t PrefixCache::Salt(std::string_view model, uint32_t weight_set, uint32_t adapter,
                          std::string_view scope) {
  // absl hashes a string with its length, so model and scope cannot trade
  // bytes across their boundary.
  return absl::HashOf(std::string_view("specline-prefix"), model, weight_set, adapter, scope);
}

uint64_t PrefixCache::BlockKey(uint64_t parent, std::span<const int32_t> block) {
  return absl::HashOf(parent, absl::Span<const int32_t>(block.data(), block.size()));
}

std::vector<uint64_t> PrefixCache::BlockKeys(std::span<const int32_t> tokens, int blocks,
                                             uint64_t salt) const {
  blocks = std::clamp<int>(blocks, 0, static_cast<int>(tokens.size()) / block_size_);
  std::vector<uint64_t> keys(blocks);
  for (int i = 0; i < blocks; ++i) {
    keys[i] = BlockKey(Parent(keys, i, salt), BlockTokens(tokens, i));
  }
  return keys;
}

int PrefixCache::Match(std::span<const uint64_t> keys, std::span<const int32_t> tokens,
                       uint64_t salt, int max_blocks) const {
  const int n = std::min<int>(static_cast<int>(keys.size()), max_blocks);
  for (int i = 0; i < n; ++i) {
    auto it = entries_.find(keys[i]);
    if (it == entries_.end() || it->second.forgotten || it->second.parent != Parent(keys, i, salt) ||
        !std::ranges::equal(it->second.tokens, BlockTokens(tokens, i))) {
      return i;
    }
  }
  return std::max(n, 0);
}

void PrefixCache::Ref(std::span<const uint64_t> keys) {
  for (uint64_t key : keys) {
    Entry& e = entries_.at(key);
    if (e.refs++ == 0) lru_.erase(e.lru);
  }
}

std::vector<PrefixCache::Evicted> PrefixCache::Unref(std::span<const uint64_t> keys) {
  std::vector<Evicted> evicted;
  for (auto key = keys.rbegin(); key != keys.rend(); ++key) {
    auto it = entries_.find(*key);
    if (it == entries_.end()) continue;  // cleared by a reset meanwhile
    Entry& e = it->second;
    if (--e.refs > 0) continue;
    if (e.forgotten) {
      evicted.push_back({it->first, e.weight_set});
      entries_.erase(it);
    } else {
      e.lru = lru_.insert(lru_.end(), *key);
    }
  }
  return evicted;
}

std::vector<PrefixCache::Evicted> PrefixCache::Forget(std::span<const uint64_t> keys) {
  std::vector<Evicted> evicted;
  for (uint64_t key : keys) {
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.forgotten) continue;
    Entry& e = it->second;
    RecordRemoved(key, e);  // it matches nothing from now on
    if (e.refs > 0) {
      e.forgotten = true;
      continue;
    }
    lru_.erase(e.lru);
    evicted.push_back({key, e.weight_set});
    entries_.erase(it);
  }
  return evicted;
}

void PrefixCache::Insert(std::span<const uint64_t> keys, int index,
                         std::span<const int32_t> tokens, uint64_t salt,
                         uint32_t weight_set, bool announce) {
  const std::span<const int32_t> block = BlockTokens(tokens, index);
  Entry& e = entries_[keys[index]];
  e.parent = Parent(keys, index, salt);
  e.tokens.assign(block.begin(), block.end());
  e.refs = 1;
  e.weight_set = weight_set;
  e.announced = events_ && announce;
  if (e.announced) events_->Stored(index == 0 ? std::nullopt : std::optional(e.parent), keys[index], block);
}

std::vector<PrefixCache::Evicted> PrefixCache::EvictLru(int64_t blocks) {
  std::vector<Evicted> evicted;
  while (blocks-- > 0 && !lru_.empty()) {
    auto it = entries_.find(lru_.front());
    evicted.push_back({it->first, it->second.weight_set});
    RecordRemoved(it->first, it->second);
    entries_.erase(it);
    lru_.pop_front();
  }
  return evicted;
}

void PrefixCache::Clear() {
  if (events_ && !entries_.empty()) events_->Cleared();
  entries_.clear();
  lru_.clear();
}

}  // namespace specline::scheduler
