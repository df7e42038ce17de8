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

#include "scheduler/batch_limits.h"
#include "scheduler/sequence.h"
#include "scheduler/slot_run.h"

namespace specline::scheduler {

// `running` in admission order. Does not change the sequences. Each
// sequence's policy shapes its run (DecodingPolicy::PlanDecode/PlanPrefill).
std::vector<SlotRun> PlanBatch(const std::vector<std::shared_ptr<Sequence>>& running,
                               const BatchLimits& policy);

}  // namespace specline::scheduler
