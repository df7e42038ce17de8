// PIPO's (pair-in, pair-out) arithmetic on the CPU: what the scheduler of a
// pipeline computes around the backbone (docs/pipo.md, "Who computes what").
//
//   z     = compressor(concat(E[a], E[b]))                 per pair (a, b)
//   l1    = lm_head(norm(h_b)), l1[pad] = -inf             from the stages' h_b
//   m     = mtp.fc(concat(mtp.norm_e(E[t1]), mtp.norm_h(h_b)))
//   h_d   = mtp.layers.0(m)   own paged KV cache, RoPE at the pair position
//   l2    = lm_head(mtp.norm(h_d)), l2[pad] = -inf
//   c     = sigmoid(confidence(concat(h_b, h_d)))
//
// The backbone layers themselves are not run here: stage workers (or
// PipoGenerate's single StageSlice) run them from backbone() with
// SliceOptions::hidden_input, feeding z. E, the final norm and the (tied)
// LM head are read from the fine-tuned backbone file, which equals the base
// in these tensors.
//
// PIPO is not lossless (no verifier; a confidence threshold commits the
// second token). It is opt-in.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "model/formats/head_file.h"
#include "model/formats/model_source.h"
#include "model/runtime/output_head.h"
#include "model/runtime/stage_slice.h"

namespace specline {

struct PipoModelOptions {
  // The MTP layer's paged KV cache: one slot per pair, summed over sequences.
  int kv_block_size = 16;
  int kv_capacity_tokens = 4096;
};

// Driven by one thread at a time (scratch buffers are reused, like
// StageSlice).
class PipoModel {
 public:
  // `head` must be method kPipo (std::invalid_argument otherwise). Opens
  // head->dir() / config().pipo_backbone_file (ModelFormatError when it cannot
  // be read or its shape is not the head's base).
  PipoModel(std::shared_ptr<const DraftHead> head, std::shared_ptr<kernels::ThreadPool> pool,
            const PipoModelOptions& options = {});
  ~PipoModel();

  int32_t pad_id() const { return head_->config().pipo_pad_id; }
  double tau_default() const { return head_->config().pipo_tau_default; }
  int dim() const { return backbone_->config().dim; }
  int vocab_size() const { return backbone_->config().vocab_size; }
  const DraftHead& head() const { return *head_; }
  // The fine-tuned backbone (run the stages from this, never from the base).
  const std::shared_ptr<const ModelSource>& backbone() const { return backbone_; }
  const std::shared_ptr<kernels::ThreadPool>& pool() const { return pool_; }

  // The prompt padded to even length (one PAD appended when odd).
  // InvalidArgument for an empty prompt, a token outside the vocabulary or
  // one equal to the PAD id (the message says which position).
  absl::StatusOr<std::vector<int32_t>> PadPrompt(std::span<const int32_t> prompt) const;

  // z[dim] of the pair (a, b). Token ids must be inside the vocabulary
  // (std::out_of_range otherwise).
  void Compress(int32_t a, int32_t b, float* z);
  // z[n, dim] of the pairs of `stream` (even length 2n: pair k is
  // stream[2k], stream[2k+1]); std::invalid_argument for an odd length.
  void CompressPairs(std::span<const int32_t> stream, float* z);

  // logits[n, vocab] = lm_head(norm(h_b)) with the PAD column at -inf.
  void Logits1(const float* h_b, int64_t n, float* logits);

  // The MTP layer over rows at consecutive pair positions first_pos ..
  // first_pos + n - 1 of `seq` (n = token1.size(); h_b holds n * dim
  // floats; first_pos <= MtpLength(seq), which becomes first_pos + n: the
  // implicit rollback/append of StageSlice). Row k's input is token1[k] (the
  // token chosen after pair first_pos + k) and that pair's h_b.
  // Outputs, each skipped when nullptr:
  //   last_logits2[vocab]: l2 of the LAST row (PAD at -inf) -- only the
  //                        newest row drafts; the LM head is the costly part;
  //   confidence[n]:       c of EVERY row (the head is a small MLP).
  // The prefill's MTP fill passes both as nullptr (docs/pipo.md, Prefill 2).
  // All-or-nothing: InvalidArgument (no rows, size mismatch, bad token, gap)
  // or ResourceExhausted (KV cache full) leave the cache unchanged.
  absl::Status Mtp(uint64_t seq, int32_t first_pos, std::span<const int32_t> token1,
                   std::span<const float> h_b, float* last_logits2, float* confidence);

  void Release(uint64_t seq) { mtp_layer_->Release(seq); }
  int32_t MtpLength(uint64_t seq) const { return mtp_layer_->Length(seq); }
  const PagedKvCache& mtp_kv_cache() const { return mtp_layer_->kv_cache(); }

 private:
  // E[token] dequantised into out[dim].
  void EmbeddingRow(int32_t token, float* out) const;
  void MaskPad(float* logits, int64_t n) const;

  std::shared_ptr<const DraftHead> head_;
  std::shared_ptr<kernels::ThreadPool> pool_;
  std::shared_ptr<const ModelSource> backbone_;
  std::unique_ptr<ModelSource> mtp_source_;  // mtp.layers.0.* as layer 0
  std::unique_ptr<StageSlice> mtp_layer_;
  std::unique_ptr<OutputHead> head1_;  // the backbone's final norm + LM head
  float eps_ = 0;
  kernels::WeightMatrix embedding_{}, lm_head_{};
  kernels::WeightMatrix comp_fc1_{}, comp_fc2_{};
  std::vector<float> comp_b1_, comp_b2_;
  std::vector<float> mtp_norm_e_, mtp_norm_h_, mtp_norm_;
  kernels::WeightMatrix mtp_fc_{};
  std::vector<float> conf_norm_;
  kernels::WeightMatrix conf_fc1_{}, conf_fc2_{};
  // Scratch reused across calls.
  std::vector<float> pairs_, hidden_, cat_, m_, normed_, conf_hidden_;
  std::vector<SlotRef> slots_;
  SliceOutput out_;
};

}  // namespace specline
