#include "model/drafters/draft_head_ppsd.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace specline {

PpsdHead::PpsdHead(std::shared_ptr<const DraftHead> head,
                   std::shared_ptr<kernels::ThreadPool> pool, const PpsdHeadOptions& options)
    : head_(std::move(head)), pool_(std::move(pool)) {
  if (!head_) throw std::invalid_argument("PpsdHead needs a head");
  if (!pool_) throw std::invalid_argument("PpsdHead needs a thread pool");
  const DraftMethod m = head_->config().method;
  if (m != DraftMethod::kPpsdNorm && m != DraftMethod::kPpsdLayer) {
    throw std::invalid_argument(absl::StrCat(head_->dir(), ": a ", DraftMethodName(m),
                                             " head is not a PPSD head"));
  }
  if (m == DraftMethod::kPpsdLayer) {
    // The head's source shows its layer as global layer E of an (E+1)-layer
    // model, so the stage machinery (hidden input, paged KV, RoPE at true
    // positions) runs it unchanged.
    SliceOptions so;
    so.kv_block_size = options.kv_block_size;
    so.kv_capacity_tokens = options.kv_capacity_tokens;
    const int e = head_->config().exit_layer;
    layer_ = std::make_unique<StageSlice>(head_->source(), e, e + 1, so, pool_);
  }
  out_ = std::make_unique<OutputHead>(head_->source(), pool_);
}

PpsdHead::~PpsdHead() = default;

absl::Status PpsdHead::Forward(std::span<const SlotRef> slots, const float* hidden,
                               float* logits) {
  return Run(slots, hidden, logits, /*last_only=*/false);
}

absl::Status PpsdHead::LastLogits(std::span<const SlotRef> slots, const float* hidden,
                                  float* logits) {
  return Run(slots, hidden, logits, /*last_only=*/true);
}

absl::Status PpsdHead::Run(std::span<const SlotRef> slots, const float* hidden, float* logits,
                           bool last_only) {
  const int64_t n = static_cast<int64_t>(slots.size());
  if (n == 0) return absl::OkStatus();
  const float* h = hidden;
  if (layer_) {
    SliceInput in;
    in.slots = slots;
    in.hidden = std::span<const float>(hidden, n * dim());
    if (absl::Status st = layer_->Forward(in, {}, &scratch_); !st.ok()) return st;
    h = scratch_.hidden.data();
  }
  if (last_only) {
    out_->Logits(h + (n - 1) * dim(), 1, logits);
  } else {
    out_->Logits(h, n, logits);
  }
  return absl::OkStatus();
}

std::vector<float> PpsdHead::Logits(uint64_t seq_id, int32_t pos, const float* hidden_after_e) {
  std::vector<float> logits(vocab_size());
  const SlotRef slot{seq_id, pos};
  absl::Status st = Forward(std::span<const SlotRef>(&slot, 1), hidden_after_e, logits.data());
  if (!st.ok()) throw std::runtime_error(std::string(st.message()));
  return logits;
}

void PpsdHead::Truncate(uint64_t seq, int32_t length) {
  if (layer_) layer_->Truncate(seq, length);
}
void PpsdHead::Release(uint64_t seq) {
  if (layer_) layer_->Release(seq);
}
int32_t PpsdHead::Length(uint64_t seq) const { return layer_ ? layer_->Length(seq) : 0; }
const PagedKvCache* PpsdHead::kv_cache() const { return layer_ ? &layer_->kv_cache() : nullptr; }

}  // namespace specline
