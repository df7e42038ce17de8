// Engine: the data plane. The driver packs and sends micro-batches; the
// receiver turns the last stage's hidden states into tokens.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "scheduler/engine.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {
namespace {

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

bool Engine::HasWorkLocked() {
  if (!up_ || static_cast<int>(inflight_.size()) >= options_.max_inflight) return false;
  AdmitLocked();
  if (!releases_.empty()) return true;
  return std::any_of(running_.begin(), running_.end(), [this](const auto& s) {
    return s->pending() > 0 || WantsDraftLocked(*s);
  });
}

void Engine::DriverLoop() {
  for (;;) {
    ReleaseDrafterState();
    internal::MicroBatch batch;
    uint64_t generation = 0;
    std::vector<DraftJob> jobs;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || HasWorkLocked(); });
      if (stop_) return;
      jobs = GatherDraftJobsLocked();
    }
    // Drafting runs without the lock: the receiver keeps verifying meanwhile.
    if (!jobs.empty()) RunDrafters(jobs);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
      ApplyDraftsLocked(jobs);
      jobs.clear();
      if (!up_ || static_cast<int>(inflight_.size()) >= options_.max_inflight) continue;
      std::vector<SlotRun> runs = PlanBatch(running_, options_.batch);
      if (runs.empty() && releases_.empty()) continue;
      const auto now = Clock::now();
      batch.set_batch_id(next_batch_id_++);
      for (SlotRun& r : runs) {
        Sequence& s = *r.seq;
        for (int32_t i = 0; i < r.count; ++i) {
          batch.add_seq_ids(s.id);
          batch.add_positions(r.first_pos + i);
          batch.add_epochs(s.epoch);
          batch.add_tokens(s.chain_token(r.first_pos + i));
        }
        if (!s.sent_any) {
          s.sent_any = true;
          s.first_scheduled = now;
          metrics_->queue_time->Observe(Seconds(now - s.arrival));
        }
        if (s.state == SeqState::kPrefill) metrics_->prompt_tokens->Increment(r.count);
        ++s.in_flight;
        s.cached += r.count;
      }
      for (int layer : TapLayersFor(runs)) batch.add_tap_layers(layer);
      for (uint64_t id : releases_) batch.add_release(id);
      releases_.clear();
      generation = generation_;
      InFlight& f = inflight_[batch.batch_id()];
      f.generation = generation;
      f.sent = now;
      f.slots = batch.seq_ids_size();
      f.runs = std::move(runs);
      metrics_->batch_slots->Observe(f.slots);
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
  std::vector<SlotRun> runs;
  // Each run's newest row goes to the output head: for its logits, or only
  // its greedy token when the request needs no more (greedy, no penalty).
  std::vector<float> rows, greedy_rows;
  std::vector<int64_t> logit_row;  // per run: its row in `rows`, or -1
  std::vector<int64_t> greedy_row;  // per run: its row in `greedy_rows`, or -1
  const int dim = config().dim;
  uint64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = inflight_.find(batch.batch_id());
    if (it == inflight_.end()) {
      // From before a failure: a stage that was stuck finished it after the
      // Reset, so stages from there on hold KV of sequences that no longer
      // exist. Their ids are never reused; release them.
      for (uint64_t id : batch.seq_ids()) {
        if (releases_.empty() || releases_.back() != id) releases_.push_back(id);
      }
      if (up_ && batch.seq_ids_size() > 0) cv_.notify_all();
      return;
    }
    InFlight f = std::move(it->second);
    inflight_.erase(it);
    generation = f.generation;
    ++steps_;
    metrics_->step_seconds->Observe(Seconds(Clock::now() - f.sent));
    for (SlotRun& r : f.runs) --r.seq->in_flight;
    if (!batch.error().empty()) {
      PipelineDownLocked(absl::StrCat(StageName(batch.error_stage()), " failed micro-batch ",
                                      batch.batch_id(), ": ", batch.error()),
                         batch.error_stage());
      return;
    }
    // Stages drop slots a flush made stale, so the rows are those the batch
    // came back with, not those it left with.
    const int slots = batch.seq_ids_size();
    if (batch.hidden().size() != static_cast<size_t>(slots) * dim * sizeof(float) ||
        batch.positions_size() != slots || slots > f.slots) {
      PipelineDownLocked(absl::StrCat("the last stage returned ", batch.hidden().size(),
                                      " bytes of hidden state for ", slots, " slots (sent ",
                                      f.slots, ") of dim ", dim, " (", StageName(n_stages() - 1),
                                      " serves a different model?)"),
                         n_stages() - 1);
      return;
    }
    StoreTapsLocked(batch);
    // Only each sequence's newest row yields a token; skip the rest, and
    // sequences that ended or were flushed while the batch was out.
    const float* hidden = reinterpret_cast<const float*>(batch.hidden().data());
    int row = 0;
    for (SlotRun& r : f.runs) {
      logit_row.push_back(-1);
      greedy_row.push_back(-1);
      const int32_t last = r.first_pos + r.count - 1;
      // Rows keep the order they were sent in; a run's last row is found
      // by skipping what lies before it (runs of dropped slots are gone).
      int found = row;
      while (found < slots &&
             !(batch.seq_ids(found) == r.seq->id && batch.positions(found) == last)) {
        ++found;
      }
      if (found == slots) continue;  // dropped by a stage as stale
      row = found;
      if (r.needs_logits && !r.seq->finished() && r.epoch == r.seq->epoch) {
        const SamplingParams& sp = r.seq->sampling;
        const bool greedy_only = sp.greedy() && sp.repetition_penalty == 1.0f;
        std::vector<float>& into = greedy_only ? greedy_rows : rows;
        (greedy_only ? greedy_row : logit_row).back() = static_cast<int64_t>(into.size()) / dim;
        into.insert(into.end(), hidden + int64_t(row) * dim, hidden + int64_t(row + 1) * dim);
      }
    }
    runs = std::move(f.runs);
  }
  const int64_t n = static_cast<int64_t>(rows.size()) / dim;
  const int vocab = head_->vocab_size();
  std::vector<float> logits(n * vocab);
  if (n > 0) head_->Logits(rows.data(), n, logits.data());
  std::vector<int32_t> greedy(greedy_rows.size() / dim);
  if (!greedy.empty()) head_->Argmax(greedy_rows.data(), static_cast<int64_t>(greedy.size()), greedy.data());
  std::vector<Notice> notices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation != generation_) return;  // the pipeline failed meanwhile
    for (size_t i = 0; i < runs.size(); ++i) {
      Sequence& s = *runs[i].seq;
      // Skipped: cancelled, or flushed while the logits were computed, or
      // (defensively) not the newest verified token.
      if ((logit_row[i] < 0 && greedy_row[i] < 0) || s.finished() || runs[i].epoch != s.epoch) {
        continue;
      }
      if (runs[i].first_pos + runs[i].count != static_cast<int32_t>(s.tokens.size())) continue;
      if (greedy_row[i] >= 0) {
        DecideTokenLocked(s, {}, greedy[greedy_row[i]]);
      } else {
        DecideTokenLocked(s, {logits.data() + logit_row[i] * vocab, static_cast<size_t>(vocab)});
      }
    }
    notices.swap(notices_);
  }
  cv_.notify_all();
  SendNotices(std::move(notices));
}

// Appends a sampled token, streams it, and ends the sequence when the token
// is a stop id, max_tokens is reached, or the context is full (the same
// rules, in the same order, as Generate in model/runtime/generator.cc).
void Engine::EmitTokenLocked(Sequence& s, int32_t token) {
  const auto now = Clock::now();
  StreamEvent e;
  e.tokens.push_back(token);
  if (s.generated() == 0) {
    s.first_token = now;
    s.state = SeqState::kDecode;
    e.queue_seconds = Seconds(s.first_scheduled - s.arrival);
  }
  s.tokens.push_back(token);
  metrics_->generation_tokens->Increment();
  FinishReason reason = FinishReason::kNone;
  if (std::find(s.stop_ids.begin(), s.stop_ids.end(), token) != s.stop_ids.end()) {
    reason = FinishReason::kStop;
  } else if (s.generated() >= s.max_tokens ||
             static_cast<int>(s.tokens.size()) > config().max_seq_len) {
    reason = FinishReason::kLength;
  }
  if (reason == FinishReason::kNone) {
    if (auto it = streams_.find(s.id); it != streams_.end()) it->second->Push(std::move(e));
    return;
  }
  spdlog::debug("request {} (seq {}): finished ({}), {} tokens", s.request_id, s.id,
                FinishReasonName(reason), s.generated());
  FinishLocked(s, reason, absl::OkStatus(), std::move(e));
}

}  // namespace specline::scheduler
