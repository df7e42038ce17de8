// Final RMSNorm + LM head: turns the last layer's hidden states into logits.
// Separate from the stage slices because the scheduler owns it (it samples
// and verifies where the logits are).
#pragma once

#include <memory>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "model/formats/model_source.h"

namespace specline {

class OutputHead {
 public:
  // Uses lm_head.weight, or the embedding matrix for tied models.
  OutputHead(const ModelSource& src, std::shared_ptr<kernels::ThreadPool> pool);

  int vocab_size() const { return static_cast<int>(lm_head_.rows); }
  int dim() const { return static_cast<int>(lm_head_.cols); }

  // logits[n, vocab] from hidden[n, dim] (pre-norm).
  void Logits(const float* hidden, int64_t n, float* logits);
  std::vector<float> Logits(const float* hidden, int64_t n);

 private:
  std::shared_ptr<kernels::ThreadPool> pool_;
  std::vector<float> norm_;
  float eps_;
  kernels::WeightMatrix lm_head_;
  std::vector<float> normed_;
};

}  // namespace specline
