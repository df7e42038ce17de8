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

// What the scheduler turns hidden rows into logits with: OutputHead on the
// CPU, cuda::CudaOutputHead on a GPU.
class LogitsHead {
 public:
  virtual ~LogitsHead() = default;
  virtual int vocab_size() const = 0;
  virtual int dim() const = 0;
  // logits[n, vocab] from hidden[n, dim] (pre-norm), both on the host.
  virtual void Logits(const float* hidden, int64_t n, float* logits) = 0;
  // The greedy token of each row: the argmax of its logits, lowest id on
  // ties (Sample's rule). For greedy requests, which need no more than that:
  // a GPU head computes it on the device and sends back 4 bytes a row
  // instead of the vocabulary's logits.
  virtual void Argmax(const float* hidden, int64_t n, int32_t* ids);
  std::vector<float> Logits(const float* hidden, int64_t n) {
    std::vector<float> out(n * vocab_size());
    Logits(hidden, n, out.data());
    return out;
  }
};

class OutputHead : public LogitsHead {
 public:
  // Uses lm_head.weight, or the embedding matrix for tied models.
  OutputHead(const ModelSource& src, std::shared_ptr<kernels::ThreadPool> pool);

  int vocab_size() const override { return static_cast<int>(lm_head_.rows); }
  int dim() const override { return static_cast<int>(lm_head_.cols); }

  void Logits(const float* hidden, int64_t n, float* logits) override;
  using LogitsHead::Logits;

 private:
  std::shared_ptr<kernels::ThreadPool> pool_;
  std::vector<float> norm_;
  float eps_;
  kernels::WeightMatrix lm_head_;
  std::vector<float> normed_;
  float final_softcap_ = 0.0f;  // Gemma 2's final-logit soft cap (0: none)
};

}  // namespace specline
