#include "model/runtime/output_head.h"

#include <algorithm>

#include "model/runtime/weights.h"

namespace specline {

void LogitsHead::Argmax(const float* hidden, int64_t n, int32_t* ids) {
  const std::vector<float> logits = Logits(hidden, n);
  const int64_t vocab = vocab_size();
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits.data() + i * vocab;
    ids[i] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);  // first max
  }
}

OutputHead::OutputHead(const ModelSource& src, std::shared_ptr<kernels::ThreadPool> pool)
    : pool_(std::move(pool)) {
  const ModelConfig& c = src.config();
  norm_ = VectorOf(src.Require("model.norm.weight", {c.dim}));
  eps_ = c.norm_eps;
  const TensorInfo* head = src.Find("lm_head.weight");
  if (head == nullptr || c.tied_embeddings) head = &src.Require("model.embed_tokens.weight");
  lm_head_ = MatrixOf(src.Require(head->name, {c.vocab_size, c.dim}));
  final_softcap_ = c.final_softcap;
}

void OutputHead::Logits(const float* hidden, int64_t n, float* logits) {
  const int64_t dim = lm_head_.cols;
  normed_.resize(n * dim);
  for (int64_t i = 0; i < n; ++i) {
    kernels::RmsNorm(hidden + i * dim, norm_.data(), eps_, dim, normed_.data() + i * dim);
  }
  kernels::MatMul(lm_head_, normed_.data(), n, logits, *pool_);
  // Gemma 2 caps the logits (monotonic, so the argmax is unchanged, but the
  // sampled distribution is not).
  kernels::SoftCap(logits, n * lm_head_.rows, final_softcap_);
}

}  // namespace specline
