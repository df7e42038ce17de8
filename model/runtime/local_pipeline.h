// All layers of a model as a chain of stage slices in one process, plus the
// output head: the embedded single-process mode, and the reference the
// distributed pipeline is tested against.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "model/runtime/output_head.h"
#include "model/runtime/stage_slice.h"

namespace specline {

// Boundaries of n contiguous slices covering [0, n_layers) as evenly as
// possible (earlier slices take the remainder): {0, b1, ..., n_layers}.
std::vector<int> EvenSplit(int n_layers, int n_slices);

class LocalPipeline {
 public:
  // `bounds` as from EvenSplit; every slice shares one thread pool.
  LocalPipeline(const ModelSource& src, const std::vector<int>& bounds,
                const SliceOptions& options, int threads);

  const ModelConfig& config() const { return slices_.front()->config(); }
  int num_slices() const { return static_cast<int>(slices_.size()); }
  StageSlice& slice(int i) { return *slices_[i]; }
  OutputHead& head() { return head_; }

  // Runs the slots through every slice; taps are global indices, each taken
  // from the first slice that can produce it. `adapter` / `adapter_arg`:
  // per-slot adapters (SliceInput; ids into SliceOptions::adapters).
  absl::Status Forward(std::span<const SlotRef> slots, std::span<const int32_t> tokens,
                       std::span<const int> taps, SliceOutput* out,
                       std::span<const uint32_t> adapter = {},
                       std::span<const float> adapter_arg = {});

  void Truncate(uint64_t seq, int32_t length);
  void Release(uint64_t seq);

 private:
  std::shared_ptr<kernels::ThreadPool> pool_;
  std::vector<std::unique_ptr<StageSlice>> slices_;
  OutputHead head_;
};

}  // namespace specline
