#include "scheduler/kv_budget.h"

#include <algorithm>

namespace specline::scheduler {

KvBudget::KvBudget(int64_t capacity_tokens, int block_size)
    : block_size_(std::max(block_size, 1)),
      capacity_blocks_(std::max<int64_t>(capacity_tokens, 0) / block_size_),
      free_blocks_(capacity_blocks_) {}

int64_t KvBudget::WorstCaseBlocks(int prompt_len, int max_tokens, int context_len) const {
  const int64_t tokens =
      std::min<int64_t>(static_cast<int64_t>(prompt_len) + max_tokens, context_len);
  return (tokens + block_size_ - 1) / block_size_;
}

bool KvBudget::TryReserve(int64_t blocks) {
  if (blocks > free_blocks_) return false;
  free_blocks_ -= blocks;
  return true;
}

void KvBudget::Return(int64_t blocks) {
  free_blocks_ = std::min(capacity_blocks_, free_blocks_ + blocks);
}

}  // namespace specline::scheduler
