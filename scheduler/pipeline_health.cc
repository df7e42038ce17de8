// PipelineHealth: polls every stage, tells the engine on the first sign of
// trouble, and brings the pipeline back once every stage answers again.
#include "scheduler/pipeline_health.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {

PipelineHealth::PipelineHealth(HealthHost& host, std::mutex& mu, const ModelConfig& config,
                               std::vector<std::unique_ptr<StageControl>> stages,
                               PipelineHealthOptions options)
    : host_(host),
      mu_(mu),
      config_(config),
      stages_(std::move(stages)),
      options_(std::move(options)),
      stage_up_(stages_.size(), false),
      stage_error_(stages_.size()),
      stage_starting_error_(stages_.size()),
      stage_answered_(stages_.size(), false),
      stage_data_addr_(stages_.size()) {}

PipelineHealth::~PipelineHealth() { Join(); }

void PipelineHealth::Start() {
  started_ = std::chrono::steady_clock::now();
  thread_ = std::thread([this] { Loop(); });
}

void PipelineHealth::Join() {
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string PipelineHealth::StageName(int stage) const {
  if (stage < 0 || stage >= n_stages()) return absl::StrCat("stage ", stage);
  std::string name = absl::StrCat("stage ", stage, " (", stages_[stage]->address());
  if (!stage_data_addr_[stage].empty()) absl::StrAppend(&name, ", data ", stage_data_addr_[stage]);
  return name + ")";
}

void PipelineHealth::PipelineDownLocked(int stage) {
  if (stage >= 0 && stage < n_stages()) stage_up_[stage] = false;
  cv_.notify_all();  // start probing for recovery at once
}

void PipelineHealth::SayWhyNotAnswering(int i, const absl::Status& status,
                                        std::chrono::steady_clock::time_point now) {
  if (status.ok()) {
    stage_answered_[i] = true;
    stage_error_[i].clear();
    return;
  }
  const std::string why = status.ToString();
  // While the deployment starts, stages load their weights and cannot be
  // reached yet: nothing is wrong, so it is said at debug level. A stage
  // that answered and stops, one still unreachable past the start-up
  // timeout (a wrong address), or one that answers with a refusal (a wrong
  // --cluster-secret-file: UNAUTHENTICATED) is warned about once per
  // distinct reason.
  const bool unreachable = absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
  if (unreachable && !stage_answered_[i] && now - started_ < options_.startup_timeout) {
    if (why != stage_starting_error_[i]) {
      spdlog::debug("{} does not answer yet (starting): {}", StageName(i), why);
      stage_starting_error_[i] = why;
    }
    return;
  }
  if (why == stage_error_[i]) return;
  if (stage_answered_[i] || !unreachable) {
    spdlog::warn("{} does not answer: {}", StageName(i), why);
  } else {
    spdlog::warn("{} has not answered within {} s of start: {}", StageName(i),
                 std::chrono::duration_cast<std::chrono::seconds>(options_.startup_timeout).count(),
                 why);
  }
  stage_error_[i] = why;
}

void PipelineHealth::Loop() {
  for (;;) {
    std::vector<absl::StatusOr<internal::StageInfo>> infos;
    for (auto& stage : stages_) infos.push_back(stage->GetInfo(options_.deadline));
    bool all_ok = true;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
      const auto now = std::chrono::steady_clock::now();
      host_.ExpireRestartsLocked(now);
      for (size_t i = 0; i < infos.size(); ++i) {
        const bool ok = infos[i].ok();
        if (ok) stage_data_addr_[i] = infos[i]->data_address();
        SayWhyNotAnswering(static_cast<int>(i), infos[i].status(), now);
        stage_up_[i] = ok;
        all_ok = all_ok && ok;
        if (!ok && host_.UpLocked()) {
          host_.PipelineDownLocked(absl::StrCat(StageName(i), " is unreachable: ",
                                                infos[i].status().message()),
                                   i);
        }
      }
    }
    bool was_up;
    {
      std::lock_guard<std::mutex> lock(mu_);
      was_up = host_.UpLocked();
    }
    if (all_ok && !was_up) {
      std::vector<internal::StageInfo> ok_infos;
      for (auto& i : infos) ok_infos.push_back(*i);
      BringUp(ok_infos);
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, options_.interval, [&] { return stop_; });
    if (stop_) return;
  }
}

// Checks that the stages form one pipeline over the whole model, wipes their
// caches (sequence ids restart with a new scheduler, and a failed pipeline
// leaves partial state) and connects to their data addresses; the engine
// then opens admission.
bool PipelineHealth::BringUp(const std::vector<internal::StageInfo>& infos) {
  const ModelConfig& c = config_;
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
  if (!infos.empty() && infos.back().next_address() != options_.inbox_address) {
    spdlog::warn("the last stage sends to {}, but the scheduler listens on {}",
                 infos.back().next_address(), options_.inbox_address);
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
    if (absl::Status st = stages_[i]->Reset(options_.deadline, report_address); !st.ok()) {
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
  // Epoch notices go to every stage directly, overtaking the stale slots.
  std::vector<std::unique_ptr<transport::ActivationSender>> notice_senders;
  for (const internal::StageInfo& in : infos) {
    auto s = transport::Connect(in.data_address(), options_.data_plane);
    if (s.ok()) notice_senders.push_back(*std::move(s));
  }
  return host_.PipelineUp(PipelineLayout{capacity, block_size}, infos, *std::move(sender),
                          std::move(notice_senders));
}

}  // namespace specline::scheduler
