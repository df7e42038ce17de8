// A per-slot change to a slice's forward pass: the stage's analogue of a
// vLLM LoRA request. The scheduler tags a slot with an adapter id and a
// scalar argument (SliceInput::adapter / adapter_arg); the slice calls the
// adapter's hooks for those rows only, so adapted and plain rows share every
// base matmul of one call. The slice knows no method: PTP's gated LoRA is
// one implementation (model/drafters/ptp_adapter.h).
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace specline {

// The projections of a layer an adapter can add to, in layer order.
enum class Projection { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumProjections = 7;

class SliceAdapter {
 public:
  virtual ~SliceAdapter() = default;

  // Width of the model rows it reads and writes (the base model's dim).
  virtual int dim() const = 0;
  // Identifies the adapter's contents: the scheduler checks that every
  // stage runs the one its policy expects.
  virtual uint64_t fingerprint() const = 0;
  // Whether `arg` is a valid argument for a slot (an error says why not).
  virtual absl::Status CheckArg(float arg) const = 0;
  // On the first slice: whether an adapted slot's input is Embed(arg)
  // instead of its token's embedding.
  virtual bool ReplacesEmbedding() const = 0;
  virtual void Embed(float arg, float* row) const = 0;
  // After the base projection `target` of global layer `layer`, for the
  // listed rows (indices into x / y): adds the adapter's term to y[r]. x rows
  // have the projection's input width, y rows its output width.
  virtual void Apply(int layer, Projection target, std::span<const int32_t> rows, const float* x,
                     int64_t x_width, float* y, int64_t y_width) const = 0;
};

}  // namespace specline
