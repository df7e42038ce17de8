// Engine: the data plane. The driver packs and sends micro-batches; the
// receiver turns the last stage's hidden states into tokens.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/runtime/ptp_coupling.h"
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
      const bool any_aux =
          std::any_of(runs.begin(), runs.end(), [](const SlotRun& r) { return r.aux > 0; });
      const bool any_pipo =
          std::any_of(runs.begin(), runs.end(), [](const SlotRun& r) { return r.seq->pipo.active; });
      std::string pipo_rows;  // stage 0's input of PIPO slots, in slot order
      for (SlotRun& r : runs) {
        Sequence& s = *r.seq;
        if (s.pipo.active) {
          // Pairs go as compressor rows (z of [cached, ...)), sent once.
          const size_t bytes = static_cast<size_t>(r.count) * config().dim * sizeof(float);
          pipo_rows.append(reinterpret_cast<const char*>(s.pipo.z.data()), bytes);
          s.pipo.z.erase(s.pipo.z.begin(), s.pipo.z.begin() + bytes / sizeof(float));
        }
        for (int32_t i = 0; i < r.count; ++i) {
          const int32_t pos = r.first_pos + i;
          batch.add_seq_ids(s.id);
          batch.add_positions(pos);
          batch.add_epochs(s.epoch);
          const bool aux = i >= r.verify_rows();
          // An auxiliary row's token is a placeholder: stage 0 embeds its u.
          batch.add_tokens(aux || s.pipo.active ? 0
                           : r.ptp_call         ? s.ptp_token(pos)
                                                : s.chain_token(pos));
          if (any_aux) {
            batch.add_aux_u(aux ? static_cast<float>(PtpUniform(s.sampling.seed, pos - s.prompt_len))
                                : -1.0f);
          }
          if (any_pipo) batch.add_pipo(s.pipo.active);
        }
        if (!s.sent_any) {
          s.sent_any = true;
          s.first_scheduled = now;
          metrics_->queue_time->Observe(Seconds(now - s.arrival));
        }
        if (s.state == SeqState::kPrefill) {
          // Prompt tokens, not positions: a PIPO position holds a pair (the
          // padded prompt's last may end in PAD), a PTP call's auxiliary
          // rows are no prompt.
          const int32_t tokens =
              s.pipo.active ? std::min(2 * r.count, s.prompt_len - 2 * r.first_pos) : r.count - r.aux;
          metrics_->prompt_tokens->Increment(tokens);
        }
        ++s.in_flight;
        s.cached += r.count;
      }
      if (any_pipo) batch.set_hidden(std::move(pipo_rows));
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
  // Rows that go to the output head. A plain run's newest row: its logits,
  // or only its greedy token when the request needs no more (greedy, no
  // penalty). A PTP call's rows: the verify rows likewise, the auxiliary
  // rows their argmax (the proposals).
  struct RunRows {
    int64_t logits = -1;  // first row in `rows`
    int64_t greedy = -1;  // first row in `greedy_rows`
    int64_t aux = -1;     // first auxiliary row in `greedy_rows`
    int64_t pipo = -1;    // a PIPO run: its first row in `pipo_rows` (h_b of every pair)
    int32_t verify = 0, n_aux = 0;
  };
  std::vector<float> rows, greedy_rows, pipo_rows;
  std::vector<RunRows> plan;
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
    // Skip the rows that yield no token, and sequences that ended or were
    // flushed while the batch was out.
    const float* hidden = reinterpret_cast<const float*>(batch.hidden().data());
    auto take = [&](std::vector<float>& into, int row, int32_t n) {
      const int64_t first = static_cast<int64_t>(into.size()) / dim;
      into.insert(into.end(), hidden + int64_t(row) * dim, hidden + int64_t(row + n) * dim);
      return first;
    };
    int row = 0;
    for (SlotRun& r : f.runs) {
      RunRows& p = plan.emplace_back();
      // A PTP call uses its teacher and auxiliary rows, a PIPO run all its
      // pairs (the MTP layer reads each one's h_b), a plain run its last.
      const bool pipo = r.seq->pipo.active;
      const int32_t used = r.ptp_call ? r.teacher + r.aux : pipo ? r.count : 1;
      const int32_t first = r.ptp_call ? r.first_pos + r.verify_rows() - r.teacher
                            : pipo     ? r.first_pos
                                       : r.first_pos + r.count - 1;
      // Rows keep the order they were sent in; a run's rows are found by
      // skipping what lies before them (runs of dropped slots are gone).
      int found = row;
      while (found < slots &&
             !(batch.seq_ids(found) == r.seq->id && batch.positions(found) == first)) {
        ++found;
      }
      if (found + used > slots) continue;  // dropped by a stage as stale
      bool whole = true;
      for (int32_t k = 1; k < used; ++k) {
        whole = whole && batch.seq_ids(found + k) == r.seq->id &&
                batch.positions(found + k) == first + k;
      }
      if (!whole) continue;
      row = found;
      if (pipo) {
        if (!r.seq->finished()) p.pipo = take(pipo_rows, row, used);
        continue;
      }
      if (!r.needs_logits || r.seq->finished() || r.epoch != r.seq->epoch) continue;
      const SamplingParams& sp = r.seq->sampling;
      const bool greedy_only = sp.greedy() && sp.repetition_penalty == 1.0f;
      p.verify = used - r.aux;  // 1 for a plain run
      p.n_aux = r.aux;
      (greedy_only ? p.greedy : p.logits) = take(greedy_only ? greedy_rows : rows, row, p.verify);
      if (r.aux > 0) p.aux = take(greedy_rows, row + p.verify, r.aux);
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
      const RunRows& p = plan[i];
      if (p.pipo >= 0) {
        if (!s.finished() && runs[i].first_pos + runs[i].count <= s.pipo.pairs()) {
          DecidePipoLocked(s, runs[i],
                           std::span(pipo_rows).subspan(p.pipo * dim, int64_t{runs[i].count} * dim));
        }
        continue;
      }
      // Skipped: cancelled, or flushed while the logits were computed, or
      // (defensively) not the newest verified token.
      if ((p.logits < 0 && p.greedy < 0) || s.finished() || runs[i].epoch != s.epoch) continue;
      const std::span<const int32_t> greedy_span =
          p.greedy < 0 ? std::span<const int32_t>() : std::span(greedy).subspan(p.greedy, p.verify);
      const std::span<const float> logit_span =
          p.logits < 0 ? std::span<const float>()
                       : std::span(logits).subspan(p.logits * vocab, int64_t{p.verify} * vocab);
      if (runs[i].ptp_call) {
        const int32_t first_teacher = runs[i].first_pos + runs[i].verify_rows() - runs[i].teacher;
        if (first_teacher + 1 != static_cast<int32_t>(s.tokens.size()) ||
            p.verify != static_cast<int32_t>(s.ptp.proposals.size()) + 1) {
          continue;
        }
        DecidePtpCallLocked(
            s, greedy_span, logit_span,
            p.aux < 0 ? std::span<const int32_t>() : std::span(greedy).subspan(p.aux, p.n_aux));
        continue;
      }
      if (runs[i].first_pos + runs[i].count != static_cast<int32_t>(s.tokens.size())) continue;
      if (p.greedy >= 0) {
        DecideTokenLocked(s, {}, greedy_span[0]);
      } else {
        DecideTokenLocked(s, logit_span);
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
             (!s.pipo.active && static_cast<int>(s.tokens.size()) > config().max_seq_len)) {
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
