// The scheduler's view of the stages' prefix cache (docs/prefix_caching.md):
// which content keys every stage holds a KV block for, how many running
// sequences reference each, and which unreferenced ones to evict first.
//
// A key names a full block of prompt positions by its content, chained as
// vLLM does: key(i) = H(key(i - 1), tokens of block i), with key(-1) a salt
// that names the model, the weight set and the adapter the rows run with,
// so blocks computed with other weights never match, and the request's
// cache scope, so requests of different principals never share a block
// (docs/security.md "The prefix cache between principals"). Each entry keeps its
// parent key and its tokens and a match compares them, so a hash collision
// can only cost a miss, never wrong KV.
//
// The scheduler decides everything (the stages never evict on their own):
// that keeps every stage's cache equal to this view by construction. The
// engine turns the decisions into MicroBatch kv_publish / kv_attach /
// kv_evict lists and clears this view whenever it resets the stages.
//
// With an event log (--kv-events-config), every entry that starts or stops
// matching is recorded as a KV event for the routers (scheduler/kv_events.h).
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "scheduler/kv_events.h"

namespace specline::scheduler {

class PrefixCache {
 public:
  explicit PrefixCache(int block_size = 16, KvEventLog* events = nullptr)
      : block_size_(block_size), events_(events) {}

  int block_size() const { return block_size_; }
  // The salt of rows run with `weight_set` and `adapter` of `model` for a
  // request of cache scope `scope` (SubmitRequest.cache_scope: opaque here,
  // encoded unambiguously by the gateway; "" = the shared namespace).
  static uint64_t Salt(std::string_view model, uint32_t weight_set, uint32_t adapter,
                       std::string_view scope);
  // The key of a block after the block keyed `parent` (the salt for the first).
  static uint64_t BlockKey(uint64_t parent, std::span<const int32_t> block);
  // Keys of the first `blocks` full blocks of `tokens`.
  std::vector<uint64_t> BlockKeys(std::span<const int32_t> tokens, int blocks,
                                  uint64_t salt) const;

  // How many leading blocks of `tokens` (keys from BlockKeys with `salt`)
  // are cached, at most `max_blocks`.
  int Match(std::span<const uint64_t> keys, std::span<const int32_t> tokens, uint64_t salt,
            int max_blocks) const;
  bool Contains(uint64_t key) const { return entries_.count(key) != 0; }

  struct Evicted {
    uint64_t key = 0;
    uint32_t weight_set = 0;
  };
  // A sequence starts to hold / stops holding these cached blocks. Unref
  // goes backwards, so a chain's deepest block is the first evicted; it
  // returns the forgotten entries (Forget) whose last holder this was.
  void Ref(std::span<const uint64_t> keys);
  std::vector<Evicted> Unref(std::span<const uint64_t> keys);
  // Records block `index` of `tokens` as cached under keys[index] in the
  // cache of `weight_set`, held by the sequence that computed it (one
  // reference). `announce`: its KV events are published (only blocks of
  // the shared cache scope are: a router that learnt one principal's
  // blocks would place another's requests by them).
  void Insert(std::span<const uint64_t> keys, int index, std::span<const int32_t> tokens,
              uint64_t salt, uint32_t weight_set, bool announce = true);
  // Forgets up to `blocks` unreferenced entries, least recently used first.
  std::vector<Evicted> EvictLru(int64_t blocks);
  // Takes `keys` out of use after a stage disagreed on them: unreferenced
  // ones are evicted now (returned), held ones match nothing any more and
  // are evicted when their last holder lets go (returned by Unref then).
  std::vector<Evicted> Forget(std::span<const uint64_t> keys);
  void Clear();

  int64_t cached_blocks() const { return static_cast<int64_t>(entries_.size()); }
  int64_t evictable_blocks() const { return static_cast<int64_t>(lru_.size()); }

 private:
  struct Entry {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    int refs = 0;
    uint32_t weight_set = 0;
    bool forgotten = false;  // matches nothing; evicted when refs reach 0
    bool announced = false;  // its BlockStored was published
    std::list<uint64_t>::iterator lru;  // valid while refs == 0
  };
  uint64_t Parent(std::span<const uint64_t> keys, int index, uint64_t salt) const {
    return index == 0 ? salt : keys[index - 1];
  }
  std::span<const int32_t> BlockTokens(std::span<const int32_t> tokens, int index) const {
    return tokens.subspan(static_cast<size_t>(index) * block_size_, block_size_);
  }

  // Records that `key` stopped matching (evicted, or forgotten while held).
  void RecordRemoved(uint64_t key, const Entry& e) {
    if (events_ && e.announced) events_->Removed(key);
  }

  int block_size_;
  KvEventLog* events_;  // not owned; null = no events
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // unreferenced keys, least recently used first
};

}  // namespace specline::scheduler
