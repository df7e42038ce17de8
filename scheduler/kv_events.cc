#include "scheduler/kv_events.h"

namespace specline::scheduler {

void KvEventLog::Stored(std::optional<uint64_t> parent, uint64_t hash,
                        std::span<const int32_t> tokens) {
  std::lock_guard lock(mu_);
  auto* last = pending_.empty() ? nullptr : std::get_if<KvBlocksStored>(&pending_.back());
  if (last && parent == last->hashes.back() &&
      last->block_size == static_cast<int>(tokens.size())) {
    last->hashes.push_back(hash);
    last->tokens.insert(last->tokens.end(), tokens.begin(), tokens.end());
  } else {
    KvBlocksStored& e = std::get<KvBlocksStored>(pending_.emplace_back(KvBlocksStored{}));
    e.parent = parent;
    e.hashes = {hash};
    e.tokens.assign(tokens.begin(), tokens.end());
    e.block_size = static_cast<int>(tokens.size());
  }
  AddedBlockLocked();
}

void KvEventLog::Removed(uint64_t hash) {
  std::lock_guard lock(mu_);
  auto* last = pending_.empty() ? nullptr : std::get_if<KvBlocksRemoved>(&pending_.back());
  if (last) {
    last->hashes.push_back(hash);
  } else {
    pending_.emplace_back(KvBlocksRemoved{{hash}});
  }
  AddedBlockLocked();
}

void KvEventLog::Cleared() {
  std::lock_guard lock(mu_);
  pending_.clear();
  pending_.emplace_back(KvAllBlocksCleared{});
  pending_blocks_ = 0;
  ready_.notify_one();
}

void KvEventLog::AddedBlockLocked() {
  if (++pending_blocks_ > max_pending_blocks_) {
    pending_.clear();
    pending_.emplace_back(KvAllBlocksCleared{});
    pending_blocks_ = 0;
  }
  ready_.notify_one();
}

std::vector<KvEvent> KvEventLog::WaitAndTake(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  ready_.wait_for(lock, timeout, [&] { return closed_ || !pending_.empty(); });
  std::vector<KvEvent> taken;
  taken.swap(pending_);
  pending_blocks_ = 0;
  return taken;
}

void KvEventLog::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  ready_.notify_all();
}

}  // namespace specline::scheduler
