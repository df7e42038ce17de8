// Paged KV cache for the layers of one stage slice.
//
// Memory is a pool of fixed-size blocks (block_size token positions, every
// layer of the slice, K and V). Each sequence owns a block table; its cache
// holds positions [0, length). Writing position p truncates the sequence to
// p + 1 first, so a rollback is either implicit (write at the rolled-back
// position) or explicit (Truncate), and both cost O(blocks freed): nothing
// is copied or zeroed.
//
// Prefix sharing (issue 18, docs/prefix_caching.md): a full block can be
// published under a content key. Blocks are reference-counted; another
// sequence can start from a list of keys (Attach) and then shares those
// blocks without a copy. A published block whose last reference goes stays
// cached until Evict names its key. The cache never decides by itself which
// key to keep or drop: the scheduler does, and tells every stage the same,
// so all stages hold the same keys. Shared blocks are read-only: a write
// (Reserve) that would land in a published or shared block is refused, and
// truncating below one only drops this sequence's reference.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

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
  // Blocks neither held by a sequence nor cached under a key.
  int free_blocks() const { return static_cast<int>(free_.size()); }
  // Blocks published under a key (held by sequences or not).
  int cached_blocks() const { return static_cast<int>(by_key_.size()); }
  // Cached blocks no sequence holds: what Evict can return to the pool.
  int evictable_blocks() const { return evictable_; }
  int num_sequences() const { return static_cast<int>(seqs_.size()); }

  // Makes room for positions [first_pos, first_pos + count) of `seq` after
  // truncating it to first_pos (which must be <= Length(seq)). On error
  // (gap in positions, out of blocks) nothing changes.
  absl::Status Reserve(uint64_t seq, int32_t first_pos, int32_t count);
  // What Reserve(seq, first_pos, count) would take from the free pool (less
  // what its truncation returns; may be negative), or why it would refuse:
  // a gap, or a write into a shared prefix block.
  absl::StatusOr<int64_t> NetDemand(uint64_t seq, int32_t first_pos, int32_t count) const;

  // Shrinks `seq` to `length` positions (no-op when already shorter) and
  // returns blocks past it to the pool.
  void Truncate(uint64_t seq, int32_t length);
  // Forgets `seq` and returns all its blocks.
  void Release(uint64_t seq);

  // Content-keyed blocks. Attach and Publish are all-or-nothing and say
  // why they refused (the scheduler and this cache disagree on the
  // sequence: the caller fails that sequence alone).
  // Starts `seq`, which must hold nothing, from the blocks of `keys` in
  // order: it then holds keys.size() * block_size positions.
  absl::Status Attach(uint64_t seq, std::span<const uint64_t> keys);
  // Publishes blocks [first_block, first_block + keys.size()) of `seq`,
  // which must be full, under `keys` (none may be cached already).
  absl::Status Publish(uint64_t seq, int32_t first_block, std::span<const uint64_t> keys);
  // Swaps `seq`'s block `block` (full, its own, not published) for the
  // block cached under `key` (the same content, published first by another
  // sequence) and frees its own copy.
  absl::Status Adopt(uint64_t seq, int32_t block, uint64_t key);
  // Forgets `keys`: a block no sequence holds is free at once, one still
  // held goes back to the pool when its last holder lets go. Never fails,
  // so a disagreement cannot fail a batch; returns how many keys were not
  // cached here or still held (the scheduler expects neither).
  int Evict(std::span<const uint64_t> keys);
  bool HasKey(uint64_t key) const { return by_key_.count(key) != 0; }
  // Forgets every key (after a reset): blocks no sequence holds are free.
  void DropCachedBlocks();

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
  // Whether writes to the block are allowed: only this sequence holds it
  // and it is not published.
  bool Private(int32_t block) const { return refs_[block] == 1 && !keyed_[block]; }
  // Drops one reference; an unpublished block nobody holds is free again.
  void Unref(int32_t block);

  KvCacheShape shape_;
  int64_t row_elems_;
  int64_t block_elems_;  // one block of one layer: block_size * row_elems
  std::vector<float> k_;  // [layer][block][pos in block][kv head][head_dim]
  std::vector<float> v_;
  std::vector<int32_t> free_;  // stack of free block ids
  std::vector<int32_t> refs_;  // per block: sequences that hold it
  std::vector<uint8_t> keyed_;  // per block: published under a key
  std::unordered_map<uint64_t, int32_t> by_key_;
  int evictable_ = 0;  // keyed blocks with refs_ == 0
  std::unordered_map<uint64_t, Sequence> seqs_;
};

}  // namespace specline
