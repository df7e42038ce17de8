// What a decoding policy may ask of the engine that runs it. The engine
// implements it; policies never see the engine's lists or threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "model/model_config.h"
#include "scheduler/metrics.h"
#include "scheduler/sequence.h"

namespace specline::scheduler {

class PolicyHost {
 public:
  virtual ~PolicyHost() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int n_stages() const = 0;
  virtual std::string StageName(int stage) const = 0;
  // Micro-batches the pipeline holds at once, and sequences running now
  // (engine lock held): the auto drafting rule compares them.
  virtual int max_inflight() const = 0;
  virtual int RunningLocked() const = 0;
  // Appends a token, streams it, and ends the sequence on a stop id, its
  // max_tokens or the context length. `row` is the target model's logits
  // row that decided the token (the verified row, for an accepted draft
  // too): its log-probabilities are streamed with it when the request asked
  // for them. Empty only where the request did not (greedy rows may ship
  // as an argmax alone, see Engine's plan of rows).
  virtual void EmitTokenLocked(Sequence& s, int32_t token, std::span<const float> row) = 0;
  virtual void FinishLocked(Sequence& s, FinishReason reason, absl::Status error) = 0;
  // s.epoch changed: tell every stage to drop this sequence's older slots.
  virtual void NoticeEpochLocked(const Sequence& s) = 0;
  virtual SchedulerMetrics::Spec& SpecMetrics(const std::string& policy) = 0;
  // How much longer a pipeline call of `rows` rows takes than one of a
  // single row, measured on this deployment (CallCostCurve).
  virtual double CallCost(int rows) const = 0;
};

}  // namespace specline::scheduler
