// PPSD early-exit heads on the CPU: draft the next token from the hidden
// state a token has after the first E layers (PPSD's "verify-while-draft").
//  - ppsd-norm:  logits = LM_head(RMSNorm(h_E))
//  - ppsd-layer: logits = LM_head(RMSNorm(Layer(h_E))), where Layer is one
//    Llama decoder layer of the base's shape with its own paged KV cache
//    (RoPE at the token's true position).
// The layer variant keeps, per sequence, K/V of positions [0, Length): feed
// every position of a sequence in order (prompt positions too, e.g. as one
// batch), and roll back with Truncate like the stages' caches.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/cpu/thread_pool.h"
#include "model/formats/head_file.h"
#include "model/runtime/output_head.h"
#include "model/runtime/stage_slice.h"

namespace specline {

struct PpsdHeadOptions {
  int kv_block_size = 16;
  int kv_capacity_tokens = 4096;  // layer head only
};

// Driven by one thread at a time (like StageSlice: it reuses scratch buffers).
class PpsdHead {
 public:
  // `head` must be a ppsd-norm or ppsd-layer head (std::invalid_argument
  // otherwise); it is kept alive (its tensors are memory-mapped).
  PpsdHead(std::shared_ptr<const DraftHead> head, std::shared_ptr<kernels::ThreadPool> pool,
           const PpsdHeadOptions& options = {});
  ~PpsdHead();

  DraftMethod method() const { return head_->config().method; }
  int exit_layer() const { return head_->config().exit_layer; }
  int dim() const { return head_->base_config().dim; }
  int vocab_size() const { return head_->base_config().vocab_size; }

  // Logits of slots.size() rows: hidden is slots.size() * dim (the hidden
  // states after layer E, i.e. Hugging Face index E), logits
  // slots.size() * vocab. For the layer head the slot rules are StageSlice's:
  // per sequence consecutive positions, the first <= Length(seq), which
  // becomes the new length (implicit rollback); all-or-nothing on error.
  absl::Status Forward(std::span<const SlotRef> slots, const float* hidden, float* logits);

  // Same rules, but only the last row's logits (vocab floats): feeding a
  // prompt's rows into the layer head's cache costs no LM head per row.
  absl::Status LastLogits(std::span<const SlotRef> slots, const float* hidden, float* logits);

  // One token: throws std::runtime_error with the status message on error.
  std::vector<float> Logits(uint64_t seq_id, int32_t pos, const float* hidden_after_e);

  // Rollback / cleanup of the layer head's cache (no-ops for the norm head).
  void Truncate(uint64_t seq, int32_t length);
  void Release(uint64_t seq);
  int32_t Length(uint64_t seq) const;
  // The layer head's cache (nullptr for the norm head), for capacity checks.
  const PagedKvCache* kv_cache() const;

 private:
  absl::Status Run(std::span<const SlotRef> slots, const float* hidden, float* logits,
                   bool last_only);

  std::shared_ptr<const DraftHead> head_;
  std::shared_ptr<kernels::ThreadPool> pool_;
  std::unique_ptr<StageSlice> layer_;  // ppsd-layer only: layer [E, E+1)
  std::unique_ptr<OutputHead> out_;
  SliceOutput scratch_;
};

}  // namespace specline
