// How large a micro-batch may grow (EngineConfig::batch), read by the
// batch builder (scheduler/batch_builder.h).
#pragma once

namespace specline::scheduler {

struct BatchLimits {
  // Rows (positions) of all sequences in one micro-batch.
  int max_batch_tokens = 256;
  // Positions of one prompt in one micro-batch, so that a long prompt is
  // spread over several batches and never stalls the decoders.
  int prefill_chunk = 64;
};

}  // namespace specline::scheduler
