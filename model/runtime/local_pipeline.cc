#include "model/runtime/local_pipeline.h"

#include <stdexcept>

namespace specline {

std::vector<int> EvenSplit(int n_layers, int n_slices) {
  if (n_slices < 1 || n_slices > n_layers) {
    throw std::invalid_argument("cannot split " + std::to_string(n_layers) + " layers into " +
                                std::to_string(n_slices) + " slices");
  }
  std::vector<int> bounds{0};
  for (int i = 0; i < n_slices; ++i) {
    bounds.push_back(bounds.back() + n_layers / n_slices + (i < n_layers % n_slices ? 1 : 0));
  }
  return bounds;
}

LocalPipeline::LocalPipeline(const ModelSource& src, const std::vector<int>& bounds,
                             const SliceOptions& options, int threads)
    : pool_(std::make_shared<kernels::ThreadPool>(threads)), head_(src, pool_) {
  if (bounds.size() < 2 || bounds.front() != 0 || bounds.back() != src.config().n_layers) {
    throw std::invalid_argument("slice bounds must run from 0 to n_layers");
  }
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    slices_.push_back(std::make_unique<StageSlice>(src, bounds[i], bounds[i + 1], options, pool_));
  }
}

absl::Status LocalPipeline::Forward(std::span<const SlotRef> slots,
                                    std::span<const int32_t> tokens, std::span<const int> taps,
                                    SliceOutput* out, std::span<const uint32_t> adapter,
                                    std::span<const float> adapter_arg) {
  for (int t : taps) {
    if (t < 0 || t > config().n_layers) {
      return absl::InvalidArgumentError("tap " + std::to_string(t) + " is outside [0, " +
                                        std::to_string(config().n_layers) + "]");
    }
  }
  SliceOutput stage_out;
  std::vector<float> hidden;
  std::vector<Tap> all_taps(taps.size());
  std::vector<bool> taken(taps.size(), false);
  for (size_t s = 0; s < slices_.size(); ++s) {
    StageSlice& slice = *slices_[s];
    std::vector<int> mine;
    std::vector<size_t> where;
    for (size_t k = 0; k < taps.size(); ++k) {
      if (!taken[k] && slice.CanTap(taps[k])) {
        mine.push_back(taps[k]);
        where.push_back(k);
        taken[k] = true;
      }
    }
    SliceInput in{slots, s == 0 ? tokens : std::span<const int32_t>{},
                  s == 0 ? std::span<const float>{} : std::span<const float>(hidden), adapter,
                  adapter_arg};
    // Slices share one configuration, so the checks that could fail (input,
    // positions, KV capacity) fail in the first slice, before any cache
    // changed.
    if (absl::Status st = slice.Forward(in, mine, &stage_out); !st.ok()) return st;
    for (size_t j = 0; j < where.size(); ++j) all_taps[where[j]] = std::move(stage_out.taps[j]);
    hidden = std::move(stage_out.hidden);
  }
  out->hidden = std::move(hidden);
  out->taps = std::move(all_taps);
  return absl::OkStatus();
}

void LocalPipeline::Truncate(uint64_t seq, int32_t length) {
  for (auto& s : slices_) s->Truncate(seq, length);
}

void LocalPipeline::Release(uint64_t seq) {
  for (auto& s : slices_) s->Release(seq);
}

}  // namespace specline
