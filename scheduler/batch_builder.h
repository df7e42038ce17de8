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
  uint32_t epoch = 0;  // the sequence's epoch when sent
  // A PTP call (docs/ptp.md): token rows [0, count - aux), of which the
  // last `teacher` need logits (the newest token, then the pending
  // proposals; in a prompt's last chunk only its last row), then `aux`
  // auxiliary rows proposing the next tokens.
  bool ptp_call = false;
  int32_t teacher = 0;
  int32_t aux = 0;
  int32_t verify_rows() const { return count - aux; }
};

// `running` in admission order. Does not change the sequences. A PTP
// sequence in decode sends its whole call (never split); its auxiliary rows
// (also behind its prompt's last chunk) shrink to fit the budget and the
// sequence's limit.
std::vector<SlotRun> PlanBatch(const std::vector<std::shared_ptr<Sequence>>& running,
                               const BatchPolicy& policy);

}  // namespace specline::scheduler
