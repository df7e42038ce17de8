// Chooses the slots of the next micro-batch (continuous batching policy):
// decode tokens first, one per sequence, because each is a user waiting for
// the next token and costs one slot; then prefill chunks of at most
// `prefill_chunk` positions, so one long prompt is spread over several
// batches and never stalls the decoders. Both in admission order. Only
// pending inputs are sent: a plain decoder has none while its token is in
// flight (the next is not known yet); a speculative one has its next draft
// as soon as the drafter made it; the chunks of a long prompt follow each
// other down the pipeline without waiting for one another.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "scheduler/sequence.h"

namespace specline::scheduler {

struct BatchLimits {
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
  uint32_t epoch = 0;  // the sequence's epoch when sent
  // Token rows [0, count - aux), of which the last `output_rows` yield a
  // token decision (a plain run: its newest row; a PTP call: the newest
  // token and the pending proposals), then `aux` auxiliary rows whose
  // inputs are not tokens (PTP's proposals of the next tokens).
  int32_t output_rows = 1;
  int32_t aux = 0;
  int32_t verify_rows() const { return count - aux; }
};

// `running` in admission order. Does not change the sequences. Each
// sequence's policy shapes its run (DecodingPolicy::PlanDecode/PlanPrefill).
std::vector<SlotRun> PlanBatch(const std::vector<std::shared_ptr<Sequence>>& running,
                               const BatchLimits& policy);

}  // namespace specline::scheduler
