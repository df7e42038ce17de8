#include "model/runtime/kv_cache.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace specline {

PagedKvCache::PagedKvCache(const KvCacheShape& shape) : shape_(shape) {
  if (shape.n_layers < 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0 ||
      shape.block_size <= 0 || shape.num_blocks < 0) {
    throw std::invalid_argument("PagedKvCache: invalid shape");
  }
  row_elems_ = int64_t{shape.n_kv_heads} * shape.head_dim;
  block_elems_ = row_elems_ * shape.block_size;
  const int64_t total = block_elems_ * shape.num_blocks * shape.n_layers;
  k_.resize(total);
  v_.resize(total);
  free_.reserve(shape.num_blocks);
  refs_.assign(shape.num_blocks, 0);
  keyed_.assign(shape.num_blocks, 0);
  // Pop order hands out low block ids first, which keeps a lone sequence's
  // cache contiguous and friendlier to the prefetcher.
  for (int b = shape.num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t PagedKvCache::Length(uint64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

absl::StatusOr<int64_t> PagedKvCache::NetDemand(uint64_t seq, int32_t first_pos,
                                                int32_t count) const {
  if (first_pos < 0 || count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", seq, ": negative position or count"));
  }
  const int32_t length = Length(seq);
  if (first_pos > length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", seq, ": position ", first_pos,
        " leaves a gap after the cached length ", length));
  }
  const int64_t end = int64_t{first_pos} + count;
  const int64_t need = (end + shape_.block_size - 1) / shape_.block_size;
  // Blocks kept after truncating to first_pos.
  const int64_t keep = (first_pos + shape_.block_size - 1) / shape_.block_size;
  auto it = seqs_.find(seq);
  const std::vector<int32_t> none;
  const std::vector<int32_t>& held = it == seqs_.end() ? none : it->second.blocks;
  // A write that starts inside a kept block writes into that block: it must
  // be this sequence's alone (shared prefix blocks are read-only).
  if (count > 0 && first_pos % shape_.block_size != 0 && !Private(held[keep - 1])) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sequence ", seq, ": position ", first_pos, " lies in a shared prefix block"));
  }
  int64_t reusable = 0;  // blocks the truncation returns to the pool
  for (int64_t b = keep; b < static_cast<int64_t>(held.size()); ++b) {
    reusable += Private(held[b]) ? 1 : 0;
  }
  return need - keep - reusable;
}

absl::Status PagedKvCache::Reserve(uint64_t seq, int32_t first_pos, int32_t count) {
  absl::StatusOr<int64_t> net = NetDemand(seq, first_pos, count);
  if (!net.ok()) return net.status();
  if (*net > static_cast<int64_t>(free_.size())) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: sequence ", seq, " needs ",
                                                     *net, " more blocks, ", free_.size(),
                                                     " free"));
  }
  Truncate(seq, first_pos);
  const int64_t need =
      (int64_t{first_pos} + count + shape_.block_size - 1) / shape_.block_size;
  Sequence& s = seqs_[seq];
  while (static_cast<int64_t>(s.blocks.size()) < need) {
    const int32_t b = free_.back();
    free_.pop_back();
    refs_[b] = 1;
    s.blocks.push_back(b);
  }
  s.length = first_pos + count;
  return absl::OkStatus();
}

void PagedKvCache::Unref(int32_t block) {
  if (--refs_[block] > 0) return;
  if (keyed_[block]) {
    ++evictable_;
  } else {
    free_.push_back(block);
  }
}

void PagedKvCache::Truncate(uint64_t seq, int32_t length) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || length >= it->second.length) return;
  Sequence& s = it->second;
  s.length = std::max(length, 0);
  const size_t keep = (s.length + shape_.block_size - 1) / shape_.block_size;
  while (s.blocks.size() > keep) {
    Unref(s.blocks.back());
    s.blocks.pop_back();
  }
}

void PagedKvCache::Release(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (int32_t b : it->second.blocks) Unref(b);
  seqs_.erase(it);
}

absl::Status PagedKvCache::Attach(uint64_t seq, std::span<const uint64_t> keys) {
  if (auto it = seqs_.find(seq); it != seqs_.end() && !it->second.blocks.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("attach: sequence ", seq, " already holds ", it->second.length, " positions"));
  }
  std::vector<int32_t> blocks;
  blocks.reserve(keys.size());
  for (uint64_t key : keys) {
    auto found = by_key_.find(key);
    if (found == by_key_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("attach: sequence ", seq, ": prefix block ", key, " is not cached here"));
    }
    blocks.push_back(found->second);
  }
  for (int32_t b : blocks) {
    if (refs_[b]++ == 0) --evictable_;
  }
  Sequence& s = seqs_[seq];
  s.blocks = std::move(blocks);
  s.length = static_cast<int32_t>(s.blocks.size()) * shape_.block_size;
  return absl::OkStatus();
}

absl::Status PagedKvCache::Publish(uint64_t seq, int32_t first_block,
                                   std::span<const uint64_t> keys) {
  auto it = seqs_.find(seq);
  const int64_t last = int64_t{first_block} + static_cast<int64_t>(keys.size());
  if (it == seqs_.end() || first_block < 0 ||
      last * shape_.block_size > it->second.length) {
    return absl::FailedPreconditionError(absl::StrCat(
        "publish: sequence ", seq, " does not hold full blocks [", first_block, ", ", last, ")"));
  }
  const std::vector<int32_t>& blocks = it->second.blocks;
  for (size_t i = 0; i < keys.size(); ++i) {
    const int32_t b = blocks[first_block + i];
    if (keyed_[b] || by_key_.count(keys[i]) ||
        std::find(keys.begin(), keys.begin() + i, keys[i]) != keys.begin() + i) {
      return absl::FailedPreconditionError(absl::StrCat(
          "publish: sequence ", seq, ": block ", first_block + i, " or key ", keys[i],
          " is published already"));
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const int32_t b = blocks[first_block + i];
    keyed_[b] = 1;
    by_key_[keys[i]] = b;
  }
  return absl::OkStatus();
}

absl::Status PagedKvCache::Adopt(uint64_t seq, int32_t block, uint64_t key) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || block < 0 || int64_t{block + 1} * shape_.block_size > it->second.length) {
    return absl::FailedPreconditionError(
        absl::StrCat("adopt: sequence ", seq, " does not hold full block ", block));
  }
  int32_t& own = it->second.blocks[block];
  auto found = by_key_.find(key);
  if (found == by_key_.end() || !Private(own)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "adopt: sequence ", seq, ": key ", key, " is not cached here or block ", block, " is shared"));
  }
  const int32_t cached = found->second;
  if (refs_[cached]++ == 0) --evictable_;
  Unref(own);  // private: back to the pool
  own = cached;
  return absl::OkStatus();
}

int PagedKvCache::Evict(std::span<const uint64_t> keys) {
  int unexpected = 0;
  for (uint64_t key : keys) {
    auto found = by_key_.find(key);
    if (found == by_key_.end()) {
      ++unexpected;
      continue;
    }
    const int32_t b = found->second;
    by_key_.erase(found);
    keyed_[b] = 0;
    if (refs_[b] == 0) {
      --evictable_;
      free_.push_back(b);
    } else {
      ++unexpected;  // its holders free it (Unref: an unkeyed block goes back)
    }
  }
  return unexpected;
}

void PagedKvCache::DropCachedBlocks() {
  for (const auto& [key, b] : by_key_) {
    keyed_[b] = 0;
    if (refs_[b] == 0) free_.push_back(b);
  }
  by_key_.clear();
  evictable_ = 0;
}

float* PagedKvCache::Row(std::vector<float>& store, int layer, uint64_t seq, int32_t pos) {
  const Sequence& s = seqs_.at(seq);
  const int32_t block = s.blocks[pos / shape_.block_size];
  const int64_t offset = (int64_t{layer} * shape_.num_blocks + block) * block_elems_ +
                         int64_t{pos % shape_.block_size} * row_elems_;
  return store.data() + offset;
}

float* PagedKvCache::K(int layer, uint64_t seq, int32_t pos) { return Row(k_, layer, seq, pos); }
float* PagedKvCache::V(int layer, uint64_t seq, int32_t pos) { return Row(v_, layer, seq, pos); }

std::span<const int32_t> PagedKvCache::BlockTable(uint64_t seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return {};
  return it->second.blocks;
}

const float* PagedKvCache::KBlock(int layer, int32_t block) const {
  return k_.data() + (int64_t{layer} * shape_.num_blocks + block) * block_elems_;
}
const float* PagedKvCache::VBlock(int layer, int32_t block) const {
  return v_.data() + (int64_t{layer} * shape_.num_blocks + block) * block_elems_;
}

}  // namespace specline
