// Test-only: a PolicyHost for the scheduler's unit tests that call a
// policy's pure hooks (planning, routing, the stop rule) with no engine
// behind them. Any call that would reach the engine fails the test.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "scheduler/policy_host.h"

namespace specline::scheduler {

class NoEngine : public PolicyHost {
 public:
  const ModelConfig& config() const override { return config_; }
  int n_stages() const override { return 1; }
  std::string StageName(int) const override { return "stage"; }
  int max_inflight() const override { return 1; }
  int RunningLocked() const override { return 0; }
  void EmitTokenLocked(Sequence&, int32_t, std::span<const float>) override { ADD_FAILURE(); }
  void FinishLocked(Sequence&, FinishReason, absl::Status) override { ADD_FAILURE(); }
  void NoticeEpochLocked(const Sequence&) override { ADD_FAILURE(); }
  SchedulerMetrics::Spec& SpecMetrics(const std::string& policy) override {
    return metrics_.ForPolicy(policy);
  }
  double CallCost(int) const override {
    ADD_FAILURE();
    return 1.0;
  }

 private:
  ModelConfig config_;
  SchedulerMetrics metrics_;
};

}  // namespace specline::scheduler
