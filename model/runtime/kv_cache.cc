#include "model/runtime/kv_cache.h"

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
  // Pop order hands out low block ids first, which keeps a lone sequence's
  // cache contiguous and friendlier to the prefetcher.
  for (int b = shape.num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t PagedKvCache::Length(uint64_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.length;
}

absl::Status PagedKvCache::Reserve(uint64_t seq, int32_t first_pos, int32_t count) {
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
  const int64_t held = seqs_.count(seq) ? static_cast<int64_t>(seqs_[seq].blocks.size()) : 0;
  const int64_t reusable = held - keep;  // blocks freed by the truncation
  if (need - keep > static_cast<int64_t>(free_.size()) + reusable) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache full: sequence ", seq, " needs ", need - keep,
        " more blocks, ", free_.size() + reusable, " free"));
  }
  Truncate(seq, first_pos);
  Sequence& s = seqs_[seq];
  while (static_cast<int64_t>(s.blocks.size()) < need) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  s.length = static_cast<int32_t>(end);
  return absl::OkStatus();
}

void PagedKvCache::Truncate(uint64_t seq, int32_t length) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end() || length >= it->second.length) return;
  Sequence& s = it->second;
  s.length = std::max(length, 0);
  const size_t keep = (s.length + shape_.block_size - 1) / shape_.block_size;
  while (s.blocks.size() > keep) {
    free_.push_back(s.blocks.back());
    s.blocks.pop_back();
  }
}

void PagedKvCache::Release(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (int32_t b : it->second.blocks) free_.push_back(b);
  seqs_.erase(it);
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
