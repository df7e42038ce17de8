// What the policies of a deployment are built from: the scheduler's
// speculation options and what the engine shares with them.
#pragma once

#include <any>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeindex>

#include "kernels/cpu/thread_pool.h"
#include "model/drafters/training_free_drafter.h"
#include "model/formats/model_source.h"
#include "scheduler/policies/draft_rules.h"
#include "scheduler/policy_host.h"
#include "scheduler/spec_state.h"

namespace specline::scheduler {

// The speculation knobs every drafting policy shares, and each policy's own
// options: a struct it defines and fills from the flags it declares
// (policy_flag.h), so adding a policy adds no field here.
struct SpecOptions {
  DraftGate policy = DraftGate::kAuto;
  v1::DecodingPolicy default_mode = v1::DECODING_POLICY_AUTOREGRESSIVE;  // for requests that do not choose
  bool allow_oracle = false;  // accept OracleOptions (tests, benchmarks)
  double min_acceptance = 0.3;
  int probe_interval = 16;
  int max_drafts = 0;  // drafts in flight per sequence; 0 = max_inflight - 1
  // KV positions of the drafters' own caches (PPSD layer head, SPD module),
  // over all sequences; a sequence that does not fit decodes plainly.
  int draft_kv_capacity_tokens = 8192;

  // The options of type T (PpsdOptions, RecycleOptions...): their defaults
  // until a flag or a test sets them.
  template <class T>
  T& Of() {
    std::any& a = own_[std::type_index(typeid(T))];
    if (!a.has_value()) a = T{};
    return *std::any_cast<T>(&a);
  }
  template <class T>
  const T& Of() const {
    static const T kDefaults{};
    auto it = own_.find(std::type_index(typeid(T)));
    return it == own_.end() ? kDefaults : *std::any_cast<T>(&it->second);
  }

 private:
  std::map<std::type_index, std::any> own_;
};

struct PolicyResources {
  PolicyHost& host;
  std::shared_ptr<const ModelSource> model;
  std::shared_ptr<kernels::ThreadPool> pool;  // drafters and scheduler-side heads
  const SpecOptions& options;
  int max_inflight = 1;
  int kv_block_size = 16;  // the stages' block size, for drafters' own caches
  int n_stages = 1;
  // The training-free drafter (its Token Recycling matrix is learnt from
  // every request), shared by the policies that use it: made by the first
  // that calls this (MakePolicies sets it).
  std::function<std::shared_ptr<TrainingFreeDrafter>()> training_free = nullptr;

  DraftRules draft_rules() const {
    return {options.policy, options.min_acceptance, options.probe_interval,
            options.max_drafts > 0 ? options.max_drafts : std::max(max_inflight - 1, 1)};
  }
};

}  // namespace specline::scheduler
