// What the policies of a deployment are built from: the scheduler's
// speculation flags and what the engine shares with them.
#pragma once

#include <memory>
#include <string>

#include "kernels/cpu/thread_pool.h"
#include "model/drafters/training_free_drafter.h"
#include "model/formats/model_source.h"
#include "scheduler/policies/draft_rules.h"
#include "scheduler/policy_host.h"
#include "scheduler/spec_state.h"

namespace specline::scheduler {

struct SpecOptions {
  DraftGate policy = DraftGate::kAuto;
  v1::DecodingPolicy default_mode = v1::DECODING_POLICY_AUTOREGRESSIVE;  // for requests that do not choose
  std::string ppsd_head;  // head directory enabling PPSD ("" = none)
  std::string spd_head;   // head directory enabling SPD ("" = none)
  // SPD's drafter: "module" (the trained module of spd_head) or "recycle"
  // (the training-free drafter, no head).
  std::string spd_drafter = "module";
  // The recycle policy: drafts per call at most (0 = not served), and the
  // training-free drafter's candidates per token and n-gram range.
  int recycle_drafts = 8;
  int recycle_candidates = 8;
  int lookup_min_ngram = 2;
  int lookup_max_ngram = 4;
  // Recent requests' tokens the training-free drafter remembers (0: none;
  // 2^18 tokens hold about 21 MiB of suffix automata).
  int64_t recycle_recent_tokens = int64_t{1} << 18;
  // PTP adapter directory enabling PTP ("" = none); every stage must run
  // the same adapter (specline-stage --ptp-head).
  std::string ptp_head;
  int ptp_n_aux = 0;  // auxiliary rows per PTP call; 0 = the adapter's N
  // PIPO head directory enabling PIPO ("" = none; not lossless, opt-in per
  // request); every stage must run its backbone (specline-stage --pipo-head).
  std::string pipo_head;
  double pipo_tau = -1;  // server default threshold; < 0 = the head's tau_default
  bool allow_oracle = false;  // accept OracleOptions (tests, benchmarks)
  double min_acceptance = 0.3;
  int probe_interval = 16;
  int max_drafts = 0;  // drafts in flight per sequence; 0 = max_inflight - 1
  // KV positions of the drafters' own caches (PPSD layer head, SPD module),
  // over all sequences; a sequence that does not fit decodes plainly.
  int draft_kv_capacity_tokens = 8192;
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
  // every request), shared by the policies that use it; null when none does.
  std::shared_ptr<TrainingFreeDrafter> training_free = nullptr;

  DraftRules draft_rules() const {
    return {options.policy, options.min_acceptance, options.probe_interval,
            options.max_drafts > 0 ? options.max_drafts : std::max(max_inflight - 1, 1)};
  }
};

}  // namespace specline::scheduler
