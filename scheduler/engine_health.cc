// Engine: the control plane. Polls every stage, declares the pipeline down
// on the first sign of trouble (from here or from the data plane), and
// brings it back once every stage answers again.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "scheduler/engine.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {

std::string Engine::StageName(int stage) const {
  if (stage < 0 || stage >= n_stages()) return absl::StrCat("stage ", stage);
  std::string name = absl::StrCat("stage ", stage, " (", stages_[stage]->address());
  if (!stage_data_addr_[stage].empty()) absl::StrAppend(&name, ", data ", stage_data_addr_[stage]);
  return name + ")";
}

// Everything running was computed by a pipeline that no longer exists: fail
// it now rather than let clients wait for tokens that will never come.
// Batches still out are void (the generation changes); the stages' caches
// are wiped by Reset when the pipeline comes back, so no release is sent.
void Engine::PipelineDownLocked(const std::string& message, int stage) {
  if (!up_) return;
  up_ = false;
  ++generation_;
  if (stage >= 0 && stage < n_stages()) stage_up_[stage] = false;
  spdlog::error("pipeline down: {}; failing {} running and {} waiting requests", message,
                running_.size(), waiting_.size());
  metrics_->pipeline_up->Set(0);
  metrics_->pipeline_failures->Increment();
  inflight_.clear();
  FailAllLocked(absl::UnavailableError("pipeline failure: " + message), /*restart=*/true);
  releases_.clear();
  budget_.ResetAll();
  UpdateGaugesLocked();
  cv_.notify_all();
  health_cv_.notify_all();  // start probing for recovery at once
}

void Engine::HealthLoop() {
  for (;;) {
    std::vector<absl::StatusOr<internal::StageInfo>> infos;
    for (auto& stage : stages_) infos.push_back(stage->GetInfo(options_.health_deadline));
    bool all_ok = true;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
      ExpireRestartsLocked(Clock::now());
      for (size_t i = 0; i < infos.size(); ++i) {
        const bool ok = infos[i].ok();
        if (ok) stage_data_addr_[i] = infos[i]->data_address();
        // Say why a stage is not usable once per distinct reason, also when
        // it never was (a wrong --cluster-secret-file, a wrong address).
        const std::string why = ok ? std::string() : infos[i].status().ToString();
        if (!ok && why != stage_error_[i]) {
          spdlog::warn("{} does not answer: {}", StageName(i), why);
        }
        stage_error_[i] = why;
        stage_up_[i] = ok;
        all_ok = all_ok && ok;
        if (!ok && up_) {
          PipelineDownLocked(absl::StrCat(StageName(i), " is unreachable: ",
                                          infos[i].status().message()),
                             i);
        }
      }
    }
    bool was_up;
    {
      std::lock_guard<std::mutex> lock(mu_);
      was_up = up_;
    }
    if (all_ok && !was_up) {
      std::vector<internal::StageInfo> ok_infos;
      for (auto& i : infos) ok_infos.push_back(*i);
      BringUp(ok_infos);
    }
    std::unique_lock<std::mutex> lock(mu_);
    health_cv_.wait_for(lock, options_.health_interval, [&] { return stop_; });
    if (stop_) return;
  }
}

// Checks that the stages form one pipeline over the whole model, wipes their
// caches (sequence ids restart with a new scheduler, and a failed pipeline
// leaves partial state), points the sender at stage 0 and opens admission.
bool Engine::BringUp(const std::vector<internal::StageInfo>& infos) {
  const ModelConfig& c = config();
  int expect = 0;
  int64_t capacity = options_.kv_capacity_tokens;
  int64_t smallest = INT64_MAX;
  for (size_t i = 0; i < infos.size(); ++i) {
    const internal::StageInfo& in = infos[i];
    if (in.layer_begin() != expect || in.layer_end() <= in.layer_begin() ||
        in.n_layers() != c.n_layers || (in.dim() != 0 && in.dim() != c.dim)) {
      spdlog::error("{} serves layers [{}, {}) of {} (dim {}); expected to start at layer {} "
                    "of {} (dim {}): not starting the pipeline",
                    StageName(i), in.layer_begin(), in.layer_end(), in.n_layers(), in.dim(),
                    expect, c.n_layers, c.dim);
      return false;
    }
    expect = in.layer_end();
    smallest = std::min(smallest, in.kv_capacity_tokens());
  }
  // Admission counts blocks of the stages' size (a stage that does not say
  // runs the default of --kv-block-size); they must all agree.
  int block_size = 0;
  for (size_t i = 0; i < infos.size(); ++i) {
    const int b = infos[i].kv_block_size() > 0 ? infos[i].kv_block_size() : options_.kv_block_size;
    if (block_size != 0 && b != block_size) {
      spdlog::error("{} uses KV blocks of {} positions, an earlier stage {}: not starting the "
                    "pipeline (start every stage with the same --kv-block-size)",
                    StageName(static_cast<int>(i)), b, block_size);
      return false;
    }
    block_size = b;
  }
  if (expect != c.n_layers) {
    spdlog::error("the stages cover layers [0, {}) of {}: not starting the pipeline", expect,
                  c.n_layers);
    return false;
  }
  if (!infos.empty() && infos.back().next_address() != inbox_->address()) {
    spdlog::warn("the last stage sends to {}, but the scheduler listens on {}",
                 infos.back().next_address(), inbox_->address());
  }
  if (capacity <= 0 || capacity > smallest) {
    if (capacity > smallest) {
      spdlog::warn("--kv-capacity-tokens {} exceeds a stage's capacity {}; using {}", capacity,
                   smallest, smallest);
    }
    capacity = smallest;
  }
  // Taps go where the last stage sends its output: the scheduler's inbox as
  // the stages reach it (our own listen address may be a wildcard).
  const std::string report_address = infos.empty() ? "" : infos.back().next_address();
  for (size_t i = 0; i < stages_.size(); ++i) {
    if (absl::Status st = stages_[i]->Reset(options_.health_deadline, report_address); !st.ok()) {
      spdlog::warn("{}: Reset failed: {}", StageName(i), st.ToString());
      return false;
    }
  }
  auto sender = transport::Connect(infos.front().data_address(), options_.data_plane);
  if (!sender.ok()) {
    spdlog::error("{}: cannot connect to its data address: {}", StageName(0),
                  sender.status().ToString());
    return false;
  }
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    sender_ = *std::move(sender);
  }
  // Epoch notices go to every stage directly, overtaking the stale slots.
  std::vector<std::unique_ptr<transport::ActivationSender>> notice_senders;
  for (const internal::StageInfo& in : infos) {
    auto s = transport::Connect(in.data_address(), options_.data_plane);
    if (s.ok()) notice_senders.push_back(*std::move(s));
  }
  {
    std::lock_guard<std::mutex> lock(notice_mu_);
    notice_senders_ = std::move(notice_senders);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
    budget_ = KvBudget(capacity, block_size);
    for (const auto& p : policies_) p->OnPipelineUpLocked(infos);
    // Restarted requests of a policy this pipeline cannot serve any more.
    const auto waiting = waiting_;
    for (const std::shared_ptr<Sequence>& seq : waiting) {
      if (absl::Status st = seq->policy->AvailableLocked(*seq->origin); !st.ok()) {
        FinishLocked(*seq, FinishReason::kError, st);
      }
    }
    releases_.clear();
    inflight_.clear();
    up_ = true;
    metrics_->pipeline_up->Set(1);
    UpdateGaugesLocked();
  }
  spdlog::info("pipeline up: {} stages, KV capacity {} tokens per stage, data to {}",
               stages_.size(), capacity, infos.front().data_address());
  cv_.notify_all();
  return true;
}

}  // namespace specline::scheduler
