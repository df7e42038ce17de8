// KV admission accounting. Every stage has the same capacity, so one budget
// in blocks stands for all of them. A sequence reserves its worst case when
// admitted (prompt + max_tokens, capped at the context length, rounded up to
// whole blocks), so a running sequence can never hit a full cache on any
// stage; the reservation returns when it finishes, is aborted or fails.
#pragma once

#include <cstdint>

namespace specline::scheduler {

class KvBudget {
 public:
  KvBudget() = default;
  // capacity_tokens is rounded down to whole blocks: a stage rounds up, so
  // the scheduler never promises more than any stage has.
  KvBudget(int64_t capacity_tokens, int block_size);

  int block_size() const { return block_size_; }
  int64_t capacity_tokens() const { return capacity_blocks_ * block_size_; }
  int64_t free_tokens() const { return free_blocks_ * block_size_; }
  int64_t free_blocks() const { return free_blocks_; }

  // Blocks a sequence needs at most.
  int64_t WorstCaseBlocks(int prompt_len, int max_tokens, int context_len) const;
  bool TryReserve(int64_t blocks);
  void Return(int64_t blocks);
  // After the stages were reset: everything is free again.
  void ResetAll() { free_blocks_ = capacity_blocks_; }

 private:
  int block_size_ = 16;
  int64_t capacity_blocks_ = 0;
  int64_t free_blocks_ = 0;
};

}  // namespace specline::scheduler
