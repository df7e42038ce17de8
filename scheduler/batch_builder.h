// Chooses the slots of the next micro-batch (continuous batching policy):
// decode tokens first, one per sequence, because each is a user waiting for
// the next token and costs one slot; then prefill chunks of at most
// `prefill_chunk` positions, so one long prompt is spread over several
// batches and never stalls the decoders. Both in admission order. A
// sequence already in flight is skipped (autoregressive: its next input is
// not known until its batch returns).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "scheduler/sequence.h"

namespace specline::scheduler {

struct BatchPolicy {
  int max_batch_tokens = 256;
  int prefill_chunk = 64;
};

// A run of consecutive positions of one sequence in the batch.
struct SlotRun {
  std::shared_ptr<Sequence> seq;
  int32_t first_pos = 0;
  int32_t count = 0;
  // True when the run ends at the sequence's newest token: the last row's
  // hidden state then yields the next token (the only logits computed).
  bool needs_logits = false;
};

// `running` in admission order. Does not change the sequences.
std::vector<SlotRun> PlanBatch(const std::vector<std::shared_ptr<Sequence>>& running,
                               const BatchPolicy& policy);

}  // namespace specline::scheduler
