// Paged KV cache for the layers of one stage slice.
//
// Memory is a pool of fixed-size blocks (block_size token positions, every
// layer of the slice, K and V). Each sequence owns a block table; its cache
// holds positions [0, length). Writing position p truncates the sequence to
// p + 1 first, so a rollback is either implicit (write at the rolled-back
// position) or explicit (Truncate), and both cost O(blocks freed): nothing
// is copied or zeroed.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"

namespace specline {

struct KvCacheShape {
  int n_layers = 0;    // layers in this slice
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;  // token positions per block
  int num_blocks = 0;   // capacity = num_blocks * block_size positions
};

class PagedKvCache {
 public:
  explicit PagedKvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  // Elements per position of one layer's K (or V): n_kv_heads * head_dim.
  int64_t row_elems() const { return row_elems_; }

  // Positions a sequence holds (0 for an unknown sequence).
  int32_t Length(uint64_t seq) const;
  // Blocks not owned by any sequence.
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int num_sequences() const { return static_cast<int>(seqs_.size()); }

  // Makes room for positions [first_pos, first_pos + count) of `seq` after
  // truncating it to first_pos (which must be <= Length(seq)). On error
  // (gap in positions, out of blocks) nothing changes.
  absl::Status Reserve(uint64_t seq, int32_t first_pos, int32_t count);

  // Shrinks `seq` to `length` positions (no-op when already shorter) and
  // returns blocks past it to the pool.
  void Truncate(uint64_t seq, int32_t length);
  // Forgets `seq` and returns all its blocks.
  void Release(uint64_t seq);

  // K/V rows of one position (must be < Length after Reserve).
  float* K(int layer, uint64_t seq, int32_t pos);
  float* V(int layer, uint64_t seq, int32_t pos);

  // Read access for attention: blocks of a sequence and the storage base.
  std::span<const int32_t> BlockTable(uint64_t seq) const;
  const float* KBlock(int layer, int32_t block) const;
  const float* VBlock(int layer, int32_t block) const;

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    int32_t length = 0;
  };
  float* Row(std::vector<float>& store, int layer, uint64_t seq, int32_t pos);

  KvCacheShape shape_;
  int64_t row_elems_;
  int64_t block_elems_;  // one block of one layer: block_size * row_elems
  std::vector<float> k_;  // [layer][block][pos in block][kv head][head_dim]
  std::vector<float> v_;
  std::vector<int32_t> free_;  // stack of free block ids
  std::unordered_map<uint64_t, Sequence> seqs_;
};

}  // namespace specline
