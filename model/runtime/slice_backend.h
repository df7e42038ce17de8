// What a pipeline stage runs, whatever the device: a contiguous range of
// decoder layers [begin, end) with its own KV cache. StageSlice runs it on
// the CPU, CudaStageSlice (model/cuda/) on a GPU; stage workers and tests
// drive either through this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/model_config.h"
#include "model/runtime/kv_cache.h"
#include "model/runtime/slice_adapter.h"

namespace specline {

struct SlotRef {
  uint64_t seq_id = 0;
  int32_t pos = 0;
};

struct SliceInput {
  std::span<const SlotRef> slots;
  std::span<const int32_t> tokens;  // first slice: one id per slot
  std::span<const float> hidden;    // other slices: slots.size() * dim
  // Empty, or one per slot: the adapter that modifies the slot (an id into
  // SliceOptions::adapters, 1-based; 0 = none) and its scalar argument
  // (empty = all 0).
  std::span<const uint32_t> adapter = {};
  std::span<const float> adapter_arg = {};
};

// Hidden states at one global layer boundary (Hugging Face numbering: 0 is
// the embedding output, k the output of layer k-1, before any final norm).
struct Tap {
  int index = 0;
  std::vector<float> hidden;  // slots.size() * dim
};

struct SliceOutput {
  std::vector<float> hidden;  // slots.size() * dim: output of layer end-1
  std::vector<Tap> taps;      // in the order requested
};

struct SliceOptions {
  int kv_block_size = 16;
  // KV capacity of this slice in token positions (summed over sequences).
  int kv_capacity_tokens = 4096;
  // A slice with begin == 0 normally embeds token ids. With hidden_input it
  // takes hidden rows like any other slice and maps no embedding: for
  // modules whose layer 0 reads computed features, not tokens (SPD's
  // speculation module, whose source has no embedding of its own).
  bool hidden_input = false;
  // The adapters slots can ask for: SliceInput::adapter id k runs
  // adapters[k - 1]. A slice refuses ids it does not have.
  std::vector<std::shared_ptr<const SliceAdapter>> adapters = {};
};

// The rows of a batch each adapter modifies: rows[k - 1] for adapter id k.
using AdaptedRows = std::vector<std::vector<int32_t>>;

class SliceBackend {
 public:
  virtual ~SliceBackend() = default;

  virtual int begin() const = 0;
  virtual int end() const = 0;
  virtual const ModelConfig& config() const = 0;
  // Tap indices this slice can produce: [begin, end].
  bool CanTap(int index) const { return index >= begin() && index <= end(); }
  // "cpu", "cuda:0", ...
  virtual std::string device() const = 0;

  // Runs the micro-batch. Per sequence, its slots' positions must be
  // consecutive in slot order and the first must not exceed the cached
  // length; that position becomes the new length (positions after it are
  // dropped: this is the implicit rollback). The call is all-or-nothing: on
  // any error (bad token, gap, KV cache full) no cache is changed.
  virtual absl::Status Forward(const SliceInput& in, std::span<const int> tap_indices,
                               SliceOutput* out) = 0;

  // Explicit rollback: keep positions [0, length) of `seq`.
  virtual void Truncate(uint64_t seq, int32_t length) = 0;
  virtual void Release(uint64_t seq) = 0;
  virtual int32_t Length(uint64_t seq) const = 0;
  // The block bookkeeping (which sequence holds which blocks); on a GPU the
  // K/V data live on the device and this object holds none.
  virtual const PagedKvCache& kv_cache() const = 0;
  // The same, for the stage's prefix-cache operations (publish, attach,
  // evict: block tables only, no K/V data moves).
  virtual PagedKvCache& mutable_kv_cache() = 0;
};

// The checks every backend makes before running a batch, then the KV
// reservation: tokens inside the vocabulary (when `embeds`), hidden of the
// right size (otherwise), adapter ids empty or one per slot, each 0 or
// an adapter of `adapters` with an argument it accepts, positions in range
// and consecutive per sequence,
// no gap after a sequence's cached length, and room in `kv` for the net
// demand. On success every sequence of the batch holds blocks up to its
// last slot; on error nothing changed. `hidden_elsewhere`: the hidden rows
// come from device memory, not in.hidden (a GPU slice's device hand-off).
absl::Status ValidateAndReserve(const SliceInput& in, bool embeds, const ModelConfig& config,
                                int begin, int end, PagedKvCache& kv,
                                bool hidden_elsewhere = false,
                                std::span<const std::shared_ptr<const SliceAdapter>> adapters = {});

// The slots of `in` each of `n_adapters` adapters modifies, ascending.
AdaptedRows RowsByAdapter(const SliceInput& in, size_t n_adapters);

// The slice's side of the adapter hooks, shared by every backend that
// supports adapters: `rows` says which slots each adapter touches.
// Replaces the first slice's input rows of adapters that embed.
void EmbedAdapted(std::span<const std::shared_ptr<const SliceAdapter>> adapters,
                  const AdaptedRows& rows, std::span<const float> args, int64_t dim, float* x);
// After base projection `target` of global layer `layer`.
void ApplyAdapters(std::span<const std::shared_ptr<const SliceAdapter>> adapters,
                   const AdaptedRows& rows, int layer, Projection target, const float* x,
                   int64_t x_width, float* y, int64_t y_width);

// Blocks for a capacity in token positions.
inline int KvBlocksFor(const SliceOptions& o) {
  return (o.kv_capacity_tokens + o.kv_block_size - 1) / o.kv_block_size;
}

}  // namespace specline
