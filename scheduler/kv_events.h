// KV cache events: what the prefix cache starts and stops holding, in the
// model of vLLM's KV events (BlockStored, BlockRemoved, AllBlocksCleared),
// so that routers which place requests on what each replica really holds
// (vllm-router's kv_aware, llm-d's precise prefix scorer) can follow this
// scheduler's cache (docs/routers.md "KV events").
//
// PrefixCache records into a KvEventLog under the engine's lock; the
// publisher's thread takes what accumulated and sends it as one batch
// (scheduler/kv_event_publisher.h). The log has its own small lock, so the
// engine never waits on the network.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <variant>
#include <vector>

namespace specline::scheduler {

// A chain of full blocks: hashes[i]'s parent is hashes[i - 1], the first's
// is `parent` (none: the chain starts the prompt). `tokens` holds the
// blocks' tokens back to back, block_size per hash.
struct KvBlocksStored {
  std::optional<uint64_t> parent;
  std::vector<uint64_t> hashes;
  std::vector<int32_t> tokens;
  int block_size = 0;
};
struct KvBlocksRemoved {
  std::vector<uint64_t> hashes;
};
struct KvAllBlocksCleared {};
using KvEvent = std::variant<KvBlocksStored, KvBlocksRemoved, KvAllBlocksCleared>;

class KvEventLog {
 public:
  // Past `max_pending_blocks` blocks not yet taken (a publisher that stopped
  // keeping up), the pending events are replaced by one AllBlocksCleared:
  // a subscriber then forgets this replica's blocks and misses where it
  // could have hit, which is safe, where a silently dropped removal would
  // leave it routing to blocks that are gone.
  explicit KvEventLog(size_t max_pending_blocks = size_t{1} << 20)
      : max_pending_blocks_(max_pending_blocks) {}

  // A block `hash` after `parent` was cached; extends the last event when
  // it continues that chain, so a prompt's blocks travel as one event.
  void Stored(std::optional<uint64_t> parent, uint64_t hash, std::span<const int32_t> tokens);
  void Removed(uint64_t hash);
  // Everything was dropped (the stages were reset): what is pending is
  // superseded.
  void Cleared();

  // The events since the last call, oldest first; waits up to `timeout`
  // for the first, or not at all once Close() was called.
  std::vector<KvEvent> WaitAndTake(std::chrono::milliseconds timeout);
  void Close();

 private:
  void AddedBlockLocked();

  std::mutex mu_;
  std::condition_variable ready_;
  std::vector<KvEvent> pending_;
  size_t pending_blocks_ = 0;
  size_t max_pending_blocks_;
  bool closed_ = false;
};

}  // namespace specline::scheduler
