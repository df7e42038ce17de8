// Engine: the data plane. The driver packs and sends micro-batches; the
// receiver turns the last stage's hidden states into tokens.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "scheduler/batch_builder.h"
#include "scheduler/emitted_logprobs.h"
#include "scheduler/engine.h"
#include "scheduler/result_rows.h"
#include "scheduler/sequence_grammar.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {
namespace {

int DecidingRuns(const std::vector<SlotRun>& runs) {
  return static_cast<int>(
      std::count_if(runs.begin(), runs.end(), [](const SlotRun& r) { return r.output_rows > 0; }));
}

// What the stages carry while a returned call's runs decide: its rows and
// deciding runs plus every call still in flight (on a pipeline of
// micro-batches a longer call delays the others too).
struct PipelineLoad {
  int rows = 0;
  int deciding = 0;

  // The rest of the load, as seen by one run of the returned call.
  CallShare ShareOf(const SlotRun& run, double tokens_per_run) const {
    return {rows - run.count, (deciding - (run.output_rows > 0 ? 1 : 0)) * tokens_per_run};
  }
};

template <class InFlightMap>
PipelineLoad LoadOf(int call_rows, const std::vector<SlotRun>& runs, const InFlightMap& inflight) {
  PipelineLoad load{call_rows, DecidingRuns(runs)};
  for (const auto& [id, other] : inflight) {
    load.rows += other.slots;
    load.deciding += DecidingRuns(other.runs);
  }
  return load;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

bool Engine::HasWorkLocked() {
  if (!up_ || static_cast<int>(inflight_.size()) >= options_.max_inflight) return false;
  AdmitLocked();
  if (!kv_log_.empty()) return true;
  return std::any_of(running_.begin(), running_.end(), [](const auto& s) {
    return s->pending() > 0 || s->policy->WantsDraftLocked(*s);
  });
}

void Engine::DriverLoop() {
  for (;;) {
    for (const auto& p : policies_) p->ReleaseRetired();
    internal::MicroBatch batch;
    uint64_t generation = 0;
    std::vector<std::pair<std::shared_ptr<Sequence>, std::unique_ptr<DraftWork>>> drafts;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || HasWorkLocked(); });
      if (stop_) return;
      for (const auto& s : running_) {
        if (!s->policy->WantsDraftLocked(*s)) continue;
        if (auto work = s->policy->GatherDraftLocked(s)) drafts.emplace_back(s, std::move(work));
      }
    }
    // Drafting runs without the lock: the receiver keeps verifying meanwhile.
    for (auto& [s, work] : drafts) work->Run();
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
      for (auto& [s, work] : drafts) {
        if (!s->finished()) s->policy->ApplyDraftLocked(*s, *work);
      }
      drafts.clear();
      if (!BuildBatchLocked(batch, generation)) continue;
    }
    const std::string wire = batch.SerializeAsString();
    absl::Status st;
    {
      std::lock_guard<std::mutex> lock(send_mu_);
      st = sender_ ? sender_->Send(wire) : absl::UnavailableError("no connection to stage 0");
    }
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (generation == generation_ && up_) {
        PipelineDownLocked(absl::StrCat(StageName(0), " cannot be reached on the data plane: ",
                                        st.message()),
                           0);
      }
    }
  }
}

bool Engine::BuildBatchLocked(internal::MicroBatch& batch, uint64_t& generation) {
  if (!up_ || static_cast<int>(inflight_.size()) >= options_.max_inflight) return false;
  std::vector<SlotRun> runs = PlanBatch(running_, options_.batch);
  if (runs.empty() && kv_log_.empty()) return false;
  const auto now = Clock::now();
  batch.set_batch_id(next_batch_id_++);
  BatchRows rows;
  std::vector<int> tap_layers;
  for (SlotRun& r : runs) {
    Sequence& s = *r.seq;
    s.policy->WriteRows(s, r, rows);
    for (int l : s.policy->TapLayers(s)) {
      if (std::find(tap_layers.begin(), tap_layers.end(), l) == tap_layers.end()) {
        tap_layers.push_back(l);
      }
    }
    if (!s.sent_any) {
      s.sent_any = true;
      s.first_scheduled = now;
      metrics_->queue_time->Observe(Seconds(now - s.arrival));
    }
    if (s.state == SeqState::kPrefill) {
      metrics_->prompt_tokens->Increment(s.policy->PromptTokens(s, r));
    }
    ++s.in_flight;
    s.cached += r.count;
  }
  rows.WriteTo(batch);
  for (int layer : tap_layers) batch.add_tap_layers(layer);
  WriteKvLogLocked(batch);
  generation = generation_;
  InFlight& f = inflight_[batch.batch_id()];
  f.generation = generation;
  f.sent = now;
  f.slots = batch.seq_ids_size();
  f.runs = std::move(runs);
  metrics_->batch_slots->Observe(f.slots);
  return true;
}

void Engine::ReceiverLoop() {
  for (;;) {
    absl::StatusOr<std::string> msg = inbox_->Receive(std::chrono::milliseconds(20));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      CheckTimeoutsLocked();
    }
    if (!msg.ok()) {
      if (absl::IsCancelled(msg.status())) return;
      continue;
    }
    internal::MicroBatch batch;
    if (!batch.ParseFromString(*msg)) {
      spdlog::error("dropped an unparsable message of {} bytes on {}", msg->size(),
                    inbox_->address());
      continue;
    }
    HandleResult(std::move(batch));
  }
}

void Engine::CheckTimeoutsLocked() {
  if (!up_) return;
  const auto now = Clock::now();
  for (const auto& [id, f] : inflight_) {
    if (now - f.sent > options_.batch_timeout) {
      PipelineDownLocked(
          absl::StrCat("micro-batch ", id, " did not come back from the pipeline within ",
                       options_.batch_timeout.count(), " ms (sent to ", StageName(0),
                       "; a stage up to ", StageName(n_stages() - 1), " is stuck or down)"),
          -1);
      return;
    }
  }
}

// The receiver's steps for one returned batch: take its in-flight record,
// check it, record what the stages did, route its rows to the runs' policies
// (all under the lock); run the head on them (without it); then let each
// policy decide (under it again, unless the pipeline failed meanwhile).
void Engine::HandleResult(internal::MicroBatch batch) {
  if (batch.kind() == internal::MicroBatch::TAPS) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      StoreTapsLocked(batch);
    }
    cv_.notify_all();  // a drafter may have been waiting for these features
    return;
  }
  if (batch.kind() != internal::MicroBatch::BATCH) return;
  const int dim = config().dim;
  std::vector<SlotRun> runs;
  ResultRows routed;
  uint64_t generation = 0;
  Clock::time_point sent;
  int call_rows = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<InFlight> f = TakeInFlightLocked(batch);
    if (!f || !CheckResultLocked(batch, *f)) return;
    generation = f->generation;
    sent = f->sent;
    call_rows = f->slots;
    RecordResultLocked(batch, *f);
    routed = RouteResultRows(batch, f->runs, dim);
    runs = std::move(f->runs);
  }
  const HeadOutputs head = RunHead(*head_, routed, dim);
  std::vector<Notice> notices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation != generation_) return;  // the pipeline failed meanwhile
    const int deciding = DecidingRuns(runs);
    const PipelineLoad load = LoadOf(call_rows, runs, inflight_);
    int64_t decided = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      Sequence& s = *runs[i].seq;
      if (s.finished()) continue;
      if (std::optional<RunOutput> out = RunOutputOf(routed, head, i, runs[i], dim)) {
        out->share = load.ShareOf(runs[i], tokens_per_run_);
        const int64_t before = s.generated();
        DecideOrFailLocked(s, runs[i], *out);
        decided += s.generated() - before;
      }
    }
    // Tokens a deciding run yields per call (1 for plain decoding, more
    // with accepted drafts): what each run's share expects of the others.
    if (deciding > 0) {
      tokens_per_run_ += 0.1 * (static_cast<double>(decided) / deciding - tokens_per_run_);
    }
    // The call's cost by its rows, from its send to its decisions: what a
    // draft row adds, in the stages and in the scheduler (a row's logits,
    // its sampling, the drafter learning from it). Where the scheduler
    // shares the cores with the stages, the latter is not small.
    call_cost_.Observe(call_rows, Seconds(Clock::now() - sent));
    notices.swap(notices_);
  }
  cv_.notify_all();
  SendNotices(std::move(notices));
}

std::optional<Engine::InFlight> Engine::TakeInFlightLocked(const internal::MicroBatch& batch) {
  auto it = inflight_.find(batch.batch_id());
  if (it == inflight_.end()) {
    // From before a failure: a stage that was stuck finished it after the
    // Reset, so stages from there on hold KV of sequences that no longer
    // exist. Their ids are never reused; release them.
    for (uint64_t id : batch.seq_ids()) LogReleaseLocked(id);
    if (up_ && batch.seq_ids_size() > 0) cv_.notify_all();
    return std::nullopt;
  }
  InFlight f = std::move(it->second);
  inflight_.erase(it);
  ++steps_;
  metrics_->step_seconds->Observe(Seconds(Clock::now() - f.sent));
  for (SlotRun& r : f.runs) --r.seq->in_flight;
  return f;
}

bool Engine::CheckResultLocked(const internal::MicroBatch& batch, const InFlight& f) {
  if (!batch.error().empty()) {
    PipelineDownLocked(absl::StrCat(StageName(batch.error_stage()), " failed micro-batch ",
                                    batch.batch_id(), ": ", batch.error()),
                       batch.error_stage());
    return false;
  }
  // Stages drop slots a flush made stale, so the rows are those the batch
  // came back with, not those it left with.
  const int dim = config().dim;
  const int slots = batch.seq_ids_size();
  if (batch.hidden().size() != static_cast<size_t>(slots) * dim * sizeof(float) ||
      batch.positions_size() != slots || slots > f.slots) {
    PipelineDownLocked(absl::StrCat("the last stage returned ", batch.hidden().size(),
                                    " bytes of hidden state for ", slots, " slots (sent ",
                                    f.slots, ") of dim ", dim, " (", StageName(n_stages() - 1),
                                    " serves a different model?)"),
                       n_stages() - 1);
    return false;
  }
  return true;
}

void Engine::RecordResultLocked(const internal::MicroBatch& batch, const InFlight& f) {
  // Sequences a stage refused end here, alone; their slots are gone.
  for (const internal::SequenceFault& fault : batch.seq_faults()) {
    RefuseSequenceLocked(fault);
  }
  StoreTapsLocked(batch);
  // The blocks this batch completed are on every stage now.
  for (const SlotRun& r : f.runs) PublishFinalBlocksLocked(*r.seq, r.first_pos + r.count);
}

// A policy's decision that throws (a bug, or a request whose processing has
// no answer: a grammar that allows nothing) ends that request with an
// error; the scheduler and every other request go on.
void Engine::DecideOrFailLocked(Sequence& s, const SlotRun& run, const RunOutput& out) {
  try {
    s.policy->DecideLocked(s, run, out);
  } catch (const std::exception& e) {
    spdlog::error("request {} (seq {}): decoding failed: {}", s.request_id, s.id, e.what());
    if (!s.finished()) {
      FinishLocked(s, FinishReason::kError, absl::InternalError(absl::StrCat("decoding failed: ", e.what())));
    }
  }
}

// Keeps the taps the policies may still read (each policy checks its rows).
void Engine::StoreTapsLocked(const internal::MicroBatch& batch) {
  const int n = batch.seq_ids_size();
  if (batch.taps_size() == 0 || batch.positions_size() != n || batch.epochs_size() != n) return;
  const int dim = config().dim;
  Sequence* s = nullptr;
  for (int i = 0; i < n; ++i) {
    if (!s || s->id != batch.seq_ids(i)) {
      auto it = std::find_if(running_.begin(), running_.end(),
                             [&](const auto& q) { return q->id == batch.seq_ids(i); });
      s = it == running_.end() ? nullptr : it->get();
    }
    if (!s) continue;
    for (const internal::TapData& t : batch.taps()) {
      if (t.hidden().size() != static_cast<size_t>(n) * dim * sizeof(float)) continue;
      const float* row = reinterpret_cast<const float*>(t.hidden().data()) + int64_t{i} * dim;
      s->policy->StoreTap(*s, batch.epochs(i), batch.positions(i), t.layer(),
                          std::span<const float>(row, dim));
    }
  }
}

void Engine::SendNotices(std::vector<Notice> notices) {
  if (notices.empty()) return;
  internal::MicroBatch m;
  m.set_kind(internal::MicroBatch::EPOCH);
  for (const auto& [seq, epoch] : notices) {
    m.add_seq_ids(seq);
    m.add_epochs(epoch);
  }
  const std::string wire = m.SerializeAsString();
  std::lock_guard<std::mutex> lock(notice_mu_);
  // Best effort: a lost notice only means a stage computes a stale slot.
  for (auto& sender : notice_senders_) (void)sender->Send(wire);
}

// Appends a sampled token, streams it, and ends the sequence when the token
// is a stop id, or when no token may follow it (Sequence::MayGenerateAt:
// max_tokens is reached or the context is full).
void Engine::EmitTokenLocked(Sequence& s, int32_t token, std::span<const float> row) {
  const auto now = Clock::now();
  StreamEvent e;
  e.tokens.push_back(token);
  if (s.wants_logprobs()) {
    // s.tokens is still the history the row was processed with.
    e.logprobs.push_back(LogprobOfRow(s, token, row));
  }
  if (s.generated() == 0) {
    s.first_token = now;
    s.state = SeqState::kDecode;
    e.queue_seconds = Seconds(s.first_scheduled - s.arrival);
    e.cached_prompt_tokens = s.prefix.cached_tokens;
  }
  if (s.grammar && !s.grammar->Verify(token)) {
    // Every decision applies the grammar's mask: a forbidden token here is
    // a policy that did not, and the output would break its format.
    FinishLocked(s, FinishReason::kError,
                 absl::InternalError(absl::StrCat("token ", token, " breaks the response format")));
    return;
  }
  s.tokens.push_back(token);
  metrics_->generation_tokens->Increment();
  FinishReason reason = FinishReason::kNone;
  if (std::find(s.stop_ids.begin(), s.stop_ids.end(), token) != s.stop_ids.end() ||
      (s.grammar && s.grammar->Terminated())) {
    reason = FinishReason::kStop;
  } else if (!s.MayGenerateAt(static_cast<int32_t>(s.tokens.size()))) {
    reason = FinishReason::kLength;
  }
  if (reason == FinishReason::kNone) {
    if (auto it = streams_.find(s.stream_id); it != streams_.end()) it->second->Push(std::move(e));
    return;
  }
  spdlog::debug("request {} (seq {}): finished ({}), {} tokens", s.request_id, s.id,
                FinishReasonName(reason), s.generated());
  FinishLocked(s, reason, absl::OkStatus(), std::move(e));
}

}  // namespace specline::scheduler
