// What the training-free drafter learns across requests, kept apart per
// cache scope (SubmitRequest.cache_scope: the principal's own namespace by
// default, a share group, split further by cache_salt), as the prefix
// cache keeps its blocks.
//
// Why per scope: both memories can speed one principal's request with
// another's text, and a speed is something a principal can time. A repeated
// prompt draws the same greedy reply, so a recent-requests index shared by
// every principal drafts bob's whole reply from alice's (1.87x his cold
// decode speed in issue 38's test), and the Token Recycling row of a token
// holds the target's top candidates after that token's latest occurrence,
// in whichever request it was: after alice's reply to a question, bob's
// reply to the same question finds his next tokens first in those rows.
// Kept per scope, a request only ever drafts from its own scope's text and
// rows (docs/security.md, "What the drafter remembers").
//
// Memory is bounded in total whatever the number of scopes: each scope's
// recent index holds at most `recent_tokens_per_scope` tokens, its matrix
// is vocab x k entries, and past `max_bytes` the least recently used scopes
// are dropped (never the one being asked for). A request holds its scope's
// memory until it ends, so a scope dropped under a running request is freed
// when that request finishes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "model/drafters/suffix_index.h"
#include "model/drafters/token_recycling.h"

namespace specline {

// One scope's memory. Thread-safe as its parts are (TokenRecycling: one
// writer beside readers; RecentTextIndex: a shared lock).
struct DrafterMemory {
  DrafterMemory(int32_t vocab_size, int k, int64_t recent_tokens)
      : recycling(vocab_size, k), recent(recent_tokens) {}

  size_t bytes() const { return recycling.bytes() + recent.bytes(); }

  TokenRecycling recycling;
  RecentTextIndex recent;
};

struct DrafterMemoryLimits {
  int32_t vocab_size = 0;
  int k = 8;
  int64_t recent_tokens_per_scope = int64_t{1} << 18;
  size_t max_bytes = size_t{512} << 20;  // every scope together
};

// The memories by scope, least recently used dropped first. Thread-safe.
class DrafterMemoryScopes {
 public:
  explicit DrafterMemoryScopes(const DrafterMemoryLimits& limits) : limits_(limits) {}

  // The scope's memory (created empty on first use), now the most recently
  // used; scopes past the bound are dropped first.
  std::shared_ptr<DrafterMemory> For(std::string_view scope);

  // Drops least recently used scopes (never `keep`) while every scope
  // together holds more than the bound. Callers that grew a memory
  // (RecentTextIndex::Remember) call it after.
  void Trim(const DrafterMemory* keep);

  size_t scopes() const;
  size_t bytes() const;
  int64_t dropped_scopes() const;

 private:
  struct Entry {
    std::shared_ptr<DrafterMemory> memory;
    std::list<std::string>::iterator lru;
  };
  size_t BytesLocked() const;
  void TrimLocked(const DrafterMemory* keep);

  const DrafterMemoryLimits limits_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // scopes, least recently used first
  absl::flat_hash_map<std::string, Entry> by_scope_;
  int64_t dropped_ = 0;
};

}  // namespace specline
