// What one sequence adds to a micro-batch: the unit the batch builder
// plans, a policy shapes (DecodingPolicy::PlanDecode / PlanPrefill) and the
// receiver hands back to the policy. Its own header so that the policy
// interface and the batch builder both use it without including each other.
#pragma once

#include <cstdint>
#include <memory>

namespace specline::scheduler {

struct Sequence;

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

}  // namespace specline::scheduler
