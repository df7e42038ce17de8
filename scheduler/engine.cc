// Engine: construction, the request API, the sequence bookkeeping shared
// by the pipeline and health threads, and the engine's side of a pipeline
// failure and recovery (PipelineHealth detects them).
#include "scheduler/engine.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "model/runtime/logprobs.h"
#include "scheduler/head_factory.h"
#include "scheduler/policies/registry.h"
#include "proto/policy_names.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {
namespace {

absl::Status LimitError(const std::string& message, const char* flag) {
  absl::Status st = absl::ResourceExhaustedError(message);
  st.SetPayload(kLimitPayload, absl::Cord(flag));
  return st;
}

PipelineHealthOptions HealthOptions(const EngineOptions& o, const std::string& inbox_address) {
  PipelineHealthOptions h;
  h.interval = o.health_interval;
  h.deadline = o.health_deadline;
  h.startup_timeout = o.stage_startup_timeout;
  h.kv_capacity_tokens = o.kv_capacity_tokens;
  h.kv_block_size = o.kv_block_size;
  h.data_plane = o.data_plane;
  h.inbox_address = inbox_address;
  return h;
}

}  // namespace

Engine::Engine(std::shared_ptr<const ModelSource> model,
               std::vector<std::unique_ptr<StageControl>> stages,
               std::unique_ptr<transport::ActivationReceiver> inbox, EngineOptions options,
               std::shared_ptr<SchedulerMetrics> metrics)
    : model_(std::move(model)),
      inbox_(std::move(inbox)),
      options_(options),
      metrics_(metrics ? std::move(metrics) : std::make_shared<SchedulerMetrics>()),
      pool_(std::make_shared<kernels::ThreadPool>(std::max(options.threads, 1))),
      head_(MakeLogitsHead(*model_, pool_, options.device)),
      waiting_(options.admission),
      health_(std::make_unique<PipelineHealth>(static_cast<HealthHost&>(*this), mu_,
                                               model_->config(), std::move(stages),
                                               HealthOptions(options_, inbox_->address()))) {
  if (options_.max_inflight <= 0) options_.max_inflight = std::max<int>(n_stages(), 1);
  // Replaced in the stages' block size when the pipeline first comes up.
  prefix_ = PrefixCache(options_.kv_block_size, options_.kv_events);
  // Heads are checked against the served model now, so a wrong head stops
  // the scheduler at start-up rather than failing requests later.
  PolicyResources resources{*this, model_, pool_, options_.spec};
  resources.max_inflight = options_.max_inflight;
  resources.kv_block_size = options_.kv_block_size;
  resources.n_stages = n_stages();
  policies_ = MakePolicies(resources);
  metrics_->pipeline_up->Set(0);
}

DecodingPolicy* Engine::PolicyFor(v1::DecodingPolicy mode) const {
  for (const auto& p : policies_) {
    if (p->mode() == mode) return p.get();
  }
  return nullptr;
}

std::vector<v1::DecodingPolicy> Engine::modes() const {
  std::vector<v1::DecodingPolicy> m;
  for (const auto& p : policies_) {
    if (p->advertised()) m.push_back(p->mode());
  }
  return m;
}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  driver_ = std::thread([this] { DriverLoop(); });
  receiver_ = std::thread([this] { ReceiverLoop(); });
  health_->Start();
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    admitting_ = false;
    health_->StopLocked();
    // Nobody will produce their tokens any more: end every stream.
    FailAllLocked(absl::UnavailableError("the scheduler is shutting down"), /*restart=*/false);
  }
  cv_.notify_all();
  inbox_->Shutdown();
  for (std::thread* t : {&driver_, &receiver_}) {
    if (t->joinable()) t->join();
  }
  health_->Join();
}

absl::Status Engine::Validate(const RequestOptions& spec) const {
  const ModelConfig& c = config();
  if (spec.prompt.empty()) return absl::InvalidArgumentError("prompt: must not be empty");
  if (static_cast<int>(spec.prompt.size()) >= c.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("prompt: ", spec.prompt.size(),
                                                   " tokens do not fit the context length of ",
                                                   c.max_seq_len, " (at most ",
                                                   c.max_seq_len - 1, ")"));
  }
  for (size_t i = 0; i < spec.prompt.size(); ++i) {
    if (spec.prompt[i] < 0 || spec.prompt[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt[", i, "]: token id ",
                                                     spec.prompt[i], " is outside the vocabulary [0, ",
                                                     c.vocab_size, ")"));
    }
  }
  for (size_t i = 0; i < spec.stop_ids.size(); ++i) {
    if (spec.stop_ids[i] < 0 || spec.stop_ids[i] >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("stop_token_ids[", i, "]: token id ",
                                                     spec.stop_ids[i], " is outside the vocabulary [0, ",
                                                     c.vocab_size, ")"));
    }
  }
  if (spec.max_tokens < 1) return absl::InvalidArgumentError("max_tokens: must be >= 1");
  if (absl::Status st = ValidatePolicyFields(spec, options_.spec, c.vocab_size); !st.ok()) {
    return st;
  }
  const DecodingPolicy* policy = PolicyFor(spec.mode);
  if (!policy) return NotServed(spec.mode);
  if (absl::Status st = policy->Validate(spec); !st.ok()) return st;
  if (spec.grammar && !policy->KeepsGrammar()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "response_format: structured output is not available with policy ",
        PolicyShortName(spec.mode), " (use ar, ppsd, spd or recycle)"));
  }
  if (std::string err = spec.sampling.Validate(c.vocab_size); !err.empty()) {
    return absl::InvalidArgumentError("sampling." + err);
  }
  if (spec.top_logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs.top_logprobs: must be in [0, ", kMaxTopLogprobs, "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(RequestOptions spec) {
  if (absl::Status st = Validate(spec); !st.ok()) return st;
  DecodingPolicy* policy = PolicyFor(spec.mode);
  // Whatever the policy computes once per request, before taking the lock.
  absl::StatusOr<std::shared_ptr<const PreparedRequest>> prepared = policy->Prepare(spec);
  if (!prepared.ok()) return prepared.status();
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!admitting_) return absl::UnavailableError("the scheduler is draining: not accepting requests");
    if (!up_) {
      return absl::UnavailableError(
          "the pipeline is down: not every stage answers (retry when it is back)");
    }
    const int64_t need = budget_.WorstCaseBlocks(policy->PromptPositions(spec, prepared->get()),
                                                 spec.max_tokens, config().max_seq_len);
    if (need * budget_.block_size() > budget_.capacity_tokens()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_tokens: prompt + max_tokens needs ", need * budget_.block_size(),
          " KV positions, more than a stage holds (", budget_.capacity_tokens(), ")"));
    }
    if (options_.max_kv_blocks_per_tenant > 0 && need > options_.max_kv_blocks_per_tenant) {
      return LimitError(absl::StrCat("tenant '", spec.tenant, "': prompt + max_tokens needs ", need,
                                     " KV blocks, more than one tenant may hold "
                                     "(--max-kv-blocks-per-tenant ",
                                     options_.max_kv_blocks_per_tenant, ")"),
                        "max-kv-blocks-per-tenant");
    }
    if (static_cast<int>(waiting_.size()) >= options_.max_waiting) {
      // A full queue is shared fairly: the newest request of a tenant that
      // holds more places than this one gives way (admission_queue.h).
      const std::string full =
          absl::StrCat("the waiting queue is full (", options_.max_waiting, " requests, --max-waiting)");
      const std::shared_ptr<Sequence> gives_way = waiting_.GivesWayTo(spec.tenant);
      if (!gives_way) return LimitError(full + "; retry later", "max-waiting");
      spdlog::info("request {} (seq {}): gives its place in the full queue to tenant '{}'",
                   gives_way->request_id, gives_way->id, spec.tenant);
      FinishLocked(*gives_way, FinishReason::kError,
                   LimitError(absl::StrCat(full, " and tenant '", gives_way->tenant,
                                           "' holds more of it than any other: its newest "
                                           "request gave its place to another tenant's; retry "
                                           "later"),
                              "max-waiting"),
                   StreamEvent{});
    }
    if (absl::Status st = policy->AvailableLocked(spec); !st.ok()) return st;
    std::shared_ptr<Sequence> seq = MakeSequenceLocked(
        std::make_shared<const RequestOptions>(std::move(spec)), *std::move(prepared));
    seq->stream_id = seq->id;
    seq->kv_blocks = need;
    stream = std::make_shared<RequestStream>(seq->stream_id);
    streams_[seq->stream_id] = stream;
    waiting_.Push(seq);
    AdmitLocked();  // at once when it fits: the queue then holds only what waits
    spdlog::debug("request {} (seq {}): queued, {} prompt tokens, max_tokens {}",
                  seq->request_id, seq->id, seq->prompt_len, seq->max_tokens);
    UpdateGaugesLocked();
  }
  cv_.notify_all();
  return stream;
}

bool Engine::Cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto find = [id](const auto& list) {
      return std::find_if(list.begin(), list.end(),
                          [id](const auto& s) { return s->stream_id == id; });
    };
    std::shared_ptr<Sequence> seq;
    const std::vector<std::shared_ptr<Sequence>> waiting = waiting_.All();
    if (auto it = find(waiting); it != waiting.end()) seq = *it;
    if (auto it = find(running_); it != running_.end()) seq = *it;
    if (!seq) return false;
    spdlog::info("request {} (seq {}): aborted after {} tokens", seq->request_id, seq->id,
                 seq->generated());
    FinishLocked(*seq, FinishReason::kAbort, absl::OkStatus());
  }
  cv_.notify_all();  // the release may go out at once
  return true;
}

void Engine::StopAdmitting() {
  std::lock_guard<std::mutex> lock(mu_);
  admitting_ = false;
}

int Engine::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiting_.size() + running_.size());
}

EngineStats Engine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s;
  s.running = static_cast<int>(running_.size());
  s.waiting = static_cast<int>(waiting_.size());
  s.kv_capacity_tokens = budget_.capacity_tokens();
  s.kv_free_tokens = budget_.free_tokens() + prefix_.evictable_blocks() * budget_.block_size();
  s.kv_cached_tokens = prefix_.cached_blocks() * budget_.block_size();
  s.kv_block_size = budget_.block_size();
  s.prefix_cache_queries = prefix_queries_;
  s.prefix_cache_hits = prefix_hits_;
  s.n_stages = n_stages();
  s.stage_up = health_->stage_up_locked();
  s.steps = steps_;
  s.admitted = admitted_;
  s.pipeline_up = up_;
  s.pipeline_failures = pipeline_failures_;
  s.kv_refusals = kv_refusals_;
  return s;
}

bool Engine::up() const {
  std::lock_guard<std::mutex> lock(mu_);
  return up_;
}

bool Engine::WaitUntilUp(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return up_ || stop_; }) && up_;
}

std::shared_ptr<Sequence> Engine::MakeSequenceLocked(
    std::shared_ptr<const RequestOptions> origin, std::shared_ptr<const PreparedRequest> prepared) {
  auto seq = std::make_shared<Sequence>(next_seq_id_++, *origin);
  seq->context_len = config().max_seq_len;
  seq->origin = std::move(origin);
  seq->prepared = std::move(prepared);
  PolicyFor(seq->mode)->Attach(*seq, seq->prepared.get());
  return seq;
}

// Ends a sequence: its stream gets the last event, its KV reservation
// returns to the budget now, and the stages free theirs on the next batch
// (which they process after any batch still carrying the sequence).
void Engine::FinishLocked(Sequence& seq, FinishReason reason, absl::Status error,
                          StreamEvent last) {
  if (seq.finished()) return;
  // Callers may pass *running_.front(): own it while the lists drop it.
  const std::shared_ptr<Sequence> keep = seq.shared_from_this();
  RetireLocked(seq);
  if (auto it = streams_.find(seq.stream_id); it != streams_.end()) {
    last.finish = reason;
    last.error = std::move(error);
    last.mode = seq.mode;
    last.generated = seq.generated();
    last.spec = seq.stats;
    it->second->Push(std::move(last));
    streams_.erase(it);
  }
  UpdateGaugesLocked();
}

void Engine::RetireLocked(Sequence& seq) {
  const std::shared_ptr<Sequence> keep = seq.shared_from_this();
  const bool was_running = seq.state != SeqState::kWaiting;
  // Its last tokens' blocks are final too (not after a pipeline failure:
  // the stages are being reset).
  if (was_running && up_) PublishFinalBlocksLocked(seq, seq.prefix.computed);
  seq.state = SeqState::kFinished;
  seq.policy->RetireLocked(seq);
  RecordSpecFinishLocked(seq);
  if (was_running) {
    budget_.Return(seq.kv_reserved);
    // Released on the stages before any eviction its references allow.
    if (seq.sent_any || seq.prefix.attached) LogReleaseLocked(seq.id);
    if (auto t = tenant_kv_blocks_.find(seq.tenant);
        t != tenant_kv_blocks_.end() && (t->second -= seq.kv_blocks) <= 0) {
      tenant_kv_blocks_.erase(t);
    }
    ReleasePrefixLocked(seq);
    std::erase_if(running_, [&](const auto& s) { return s.get() == &seq; });
  } else {
    waiting_.Remove(seq);
  }
}

bool Engine::RestartableLocked(const Sequence& seq) const {
  return !stop_ && options_.retry_window.count() > 0 && seq.attempts < options_.max_attempts &&
         seq.first_token == Clock::time_point{} && seq.origin != nullptr;  // the client saw no token
}

// Iterates over copies: finishing a sequence removes it from the lists.
void Engine::FailAllLocked(const absl::Status& error, bool restart) {
  const auto now = Clock::now();
  const auto running = running_;
  const auto waiting = waiting_.All();
  std::vector<std::shared_ptr<Sequence>> restarts;
  for (const std::shared_ptr<Sequence>& s : running) {
    if (!restart || !RestartableLocked(*s)) {
      FinishLocked(*s, FinishReason::kError, error);
      continue;
    }
    // A fresh attempt under a new stages' id: the stages are wiped when the
    // pipeline comes back, and any late batch of the old id is void.
    RetireLocked(*s);
    std::shared_ptr<Sequence> again = MakeSequenceLocked(s->origin, s->prepared);
    again->stream_id = s->stream_id;
    again->arrival = s->arrival;
    again->kv_blocks = s->kv_blocks;
    again->attempts = s->attempts + 1;
    again->retry_deadline = now + options_.retry_window;
    restarts.push_back(std::move(again));
  }
  size_t held = restarts.size();
  for (const std::shared_ptr<Sequence>& s : waiting) {
    if (!restart || !RestartableLocked(*s)) {
      FinishLocked(*s, FinishReason::kError, error);
    } else {
      s->retry_deadline = now + options_.retry_window;
      ++held;
    }
  }
  if (held > 0) {
    spdlog::warn("{} requests that had no token yet will run when the pipeline is back "
                 "(within {} ms)", held, options_.retry_window.count());
    metrics_->restarted_requests->Increment(static_cast<double>(held));
  }
  // Restarts were admitted before anything still waiting: they go first.
  waiting_.PushRestarts(restarts);
  UpdateGaugesLocked();
}

void Engine::ExpireRestartsLocked(Clock::time_point now) {
  if (up_) return;
  const auto waiting = waiting_.All();
  for (const std::shared_ptr<Sequence>& s : waiting) {
    if (s->retry_deadline != Clock::time_point{} && now >= s->retry_deadline) {
      FinishLocked(*s, FinishReason::kError,
                   absl::UnavailableError(absl::StrCat(
                       "pipeline failure: the pipeline did not come back within ",
                       options_.retry_window.count(), " ms (the request had no token yet)")));
    }
  }
}

// Everything running was computed by a pipeline that no longer exists: fail
// it now rather than let clients wait for tokens that will never come.
// Batches still out are void (the generation changes); the stages' caches
// are wiped by Reset when the pipeline comes back, so no release is sent.
void Engine::PipelineDownLocked(const std::string& message, int stage) {
  if (!up_) return;
  up_ = false;
  ++generation_;
  health_->PipelineDownLocked(stage);
  spdlog::error("pipeline down: {}; failing {} running and {} waiting requests", message,
                running_.size(), waiting_.size());
  metrics_->pipeline_up->Set(0);
  metrics_->pipeline_failures->Increment();
  ++pipeline_failures_;
  inflight_.clear();
  FailAllLocked(absl::UnavailableError("pipeline failure: " + message), /*restart=*/true);
  budget_.ResetAll();
  ClearPrefixCacheLocked(budget_.block_size());
  UpdateGaugesLocked();
  cv_.notify_all();
}

// The stages agree and were wiped (PipelineHealth::BringUp): point the
// sender at stage 0 and open admission.
bool Engine::PipelineUp(const PipelineLayout& layout,
                        const std::vector<internal::StageInfo>& infos,
                        std::unique_ptr<transport::ActivationSender> sender,
                        std::vector<std::unique_ptr<transport::ActivationSender>> notice_senders) {
  {
    std::lock_guard<std::mutex> lock(send_mu_);
    sender_ = std::move(sender);
  }
  {
    std::lock_guard<std::mutex> lock(notice_mu_);
    notice_senders_ = std::move(notice_senders);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
    budget_ = KvBudget(layout.kv_capacity_tokens, layout.kv_block_size);
    ClearPrefixCacheLocked(layout.kv_block_size);
    for (const auto& p : policies_) p->OnPipelineUpLocked(infos);
    // Restarted requests of a policy this pipeline cannot serve any more.
    const auto waiting = waiting_.All();
    for (const std::shared_ptr<Sequence>& seq : waiting) {
      if (absl::Status st = seq->policy->AvailableLocked(*seq->origin); !st.ok()) {
        FinishLocked(*seq, FinishReason::kError, st);
      }
    }
    kv_log_.clear();
    inflight_.clear();
    up_ = true;
    metrics_->pipeline_up->Set(1);
    UpdateGaugesLocked();
  }
  spdlog::info("pipeline up: {} stages, KV capacity {} tokens per stage, data to {}",
               n_stages(), layout.kv_capacity_tokens, infos.front().data_address());
  cv_.notify_all();
  return true;
}

// In the queue's order (fifo, or round robin across tenants): the candidate
// waits for capacity rather than being overtaken by smaller requests, so no
// request starves. Only a tenant at its KV quota is passed over: it waits
// for its own requests to finish, not for capacity others could use.
void Engine::AdmitLocked() {
  while (up_ && !waiting_.empty()) {
    std::shared_ptr<Sequence> seq =
        waiting_.Next([this](const Sequence& s) { return WithinTenantQuotaLocked(s); });
    if (!seq || !ReserveKvLocked(*seq)) break;
    waiting_.Pop(*seq);
    tenant_kv_blocks_[seq->tenant] += seq->kv_blocks;
    ++admitted_;
    seq->state = SeqState::kPrefill;
    running_.push_back(seq);
  }
  UpdateGaugesLocked();
}

bool Engine::WithinTenantQuotaLocked(const Sequence& seq) const {
  if (options_.max_kv_blocks_per_tenant <= 0) return true;
  const auto it = tenant_kv_blocks_.find(seq.tenant);
  const int64_t held = it == tenant_kv_blocks_.end() ? 0 : it->second;
  return held + seq.kv_blocks <= options_.max_kv_blocks_per_tenant;
}

void Engine::RecordSpecFinishLocked(const Sequence& s) {
  if (s.stats.cycles == 0) return;  // plain decoding counts no cycles
  SpecMetrics(s.policy->name())
      .equivalent_acceptance_length->Observe(static_cast<double>(n_stages()) * s.generated() /
                                             static_cast<double>(s.stats.cycles));
}

void Engine::UpdateGaugesLocked() {
  metrics_->running->Set(running_.size());
  metrics_->waiting->Set(waiting_.size());
  metrics_->kv_free_tokens->Set(budget_.free_tokens() +
                                prefix_.evictable_blocks() * budget_.block_size());
  metrics_->prefix_cache_usage->Set(
      budget_.capacity_tokens() > 0
          ? static_cast<double>(prefix_.cached_blocks() * budget_.block_size()) /
                budget_.capacity_tokens()
          : 0.0);
}

}  // namespace specline::scheduler
