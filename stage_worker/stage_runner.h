// Runs micro-batches through one StageSlice: the data-plane half of a stage
// worker, shared by the standalone process (specline-stage) and by stages
// that live inside another process (tests, the embedded mode).
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "model/runtime/stage_slice.h"
#include "specline/internal/stage.pb.h"
#include "transport/transport.h"

namespace specline {

class StageRunner {
 public:
  // stage: index in the pipeline; is_last: output goes back to the
  // scheduler (hidden of the final layer, before the final norm).
  StageRunner(StageSlice& slice, int stage, bool is_last);

  // Applies batch.release, then runs the slots (tokens on stage 0, hidden
  // otherwise), replacing batch.hidden with this stage's output and
  // appending requested taps this stage can produce. On a slice error sets
  // batch.error / error_stage and leaves the caches unchanged; a batch that
  // arrives with an error is passed on untouched.
  void Process(internal::MicroBatch& batch);

  // Receives from `in`, processes, sends to `out` until Stop().
  void Start(std::unique_ptr<transport::ActivationReceiver> in,
             std::unique_ptr<transport::ActivationSender> out);
  void Stop();
  ~StageRunner();

  uint64_t batches() const { return batches_.load(); }
  StageSlice& slice() { return slice_; }

 private:
  void Loop();
  StageSlice& slice_;
  int stage_;
  bool is_last_;
  std::unique_ptr<transport::ActivationReceiver> in_;
  std::unique_ptr<transport::ActivationSender> out_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> batches_{0};
  std::thread thread_;
};

}  // namespace specline
