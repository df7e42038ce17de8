// Single-process PIPO decoders on the CPU: the reference a pipelined PIPO
// engine is tested against (docs/pipo.md, "One step" and "Prefill").
//
// PipoGenerate runs the whole fine-tuned backbone as one StageSlice fed with
// compressor outputs (SliceOptions::hidden_input) at pair positions, and
// PipoModel for everything else (token1, the MTP layer, token2, the
// confidence and the acceptance). BackbonePairwiseGenerate is PIPO's own
// backbone decoding pair by pair, written independently (no MTP, no
// confidence, every step recomputed from the whole stream): PipoGenerate with
// tau > 1 must equal it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/drafters/pipo_model.h"

namespace specline {

struct PipoGenerateOptions {
  // Confidence threshold: the second token of a pair is committed iff
  // c >= tau, compared in float32 (as PyTorch compares a float32 tensor with
  // a Python float). tau > 1 never accepts. nullopt: the head's tau_default.
  std::optional<double> tau;
  int max_tokens = 64;
  float temperature = 0.0f;  // 0 = greedy (argmax, lowest id on ties)
  uint64_t seed = 0;         // the Rng of model/runtime/sampler.h
  // Generation ends at the first emitted stop id (t1 or t2), which is kept;
  // what follows is dropped. Empty: run to max_tokens (the Python reference).
  std::vector<int32_t> stop_ids;
  // The sequence id used in the PipoModel's MTP cache (released at the end).
  uint64_t seq_id = 0;
};

// One decode step (pair position = the last pair the backbone processed).
struct PipoStepInfo {
  int32_t pair_position = 0;
  int32_t t1 = 0;
  // The MTP's candidate: greedy, its argmax whether accepted or not; sampled,
  // the draw when accepted and PAD when not (no draw is made on rejection).
  int32_t t2 = 0;
  float confidence = 0.0f;
  bool accepted = false;
  float logits1_max = 0.0f;  // max of l1 / l2 after the PAD mask
  float logits2_max = 0.0f;
};

struct PipoGenerateResult {
  std::vector<int32_t> padded_prompt;
  // Emitted tokens: t1 of every step, t2 of accepted steps; PAD-free;
  // truncated to max_tokens (an accepted t2 may be cut) or after a stop id.
  std::vector<int32_t> tokens;
  // The pair stream: the padded prompt then (t1, t2 or PAD) of every step,
  // including the last step's pair, which is never fed to the backbone.
  std::vector<int32_t> stream;
  std::vector<PipoStepInfo> steps;
  bool stopped = false;  // ended at a stop id rather than max_tokens
};

// InvalidArgument for a bad prompt (PipoModel::PadPrompt), max_tokens < 0,
// a NaN tau or a bad temperature; ResourceExhausted when the model's MTP
// cache is full.
absl::StatusOr<PipoGenerateResult> PipoGenerate(PipoModel& model,
                                                std::span<const int32_t> prompt,
                                                const PipoGenerateOptions& options);

// The padded prompt, then one pair (t, PAD) per generated token t; t from
// logits1 of the last pair (PAD masked): argmax, or one Rng draw per token.
// Uses max_tokens, temperature, seed and stop_ids of `options` (tau and
// seq_id are ignored). Returns the generated tokens.
absl::StatusOr<std::vector<int32_t>> BackbonePairwiseGenerate(PipoModel& model,
                                                              std::span<const int32_t> prompt,
                                                              const PipoGenerateOptions& options);

}  // namespace specline
