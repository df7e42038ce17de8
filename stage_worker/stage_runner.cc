#include "stage_worker/stage_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace specline {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

StageRunner::StageRunner(SliceBackend& slice, int stage, bool is_last, SliceBackend* pipo_slice)
    : slice_(slice), stage_(stage), is_last_(is_last), pipo_slice_(pipo_slice) {
  std::lock_guard<std::mutex> lock(mu_);
  PublishStatsLocked();
}

void StageRunner::PublishStatsLocked() {
  const PagedKvCache& kv = slice_.kv_cache();
  StageStats s;
  s.kv_capacity_tokens = int64_t{kv.shape().num_blocks} * kv.shape().block_size;
  s.kv_free_tokens = int64_t{kv.free_blocks()} * kv.shape().block_size;
  s.kv_block_size = kv.shape().block_size;
  s.sequences = kv.num_sequences();
  s.stale_slots = stale_slots_;
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = s;
}

// A batch mixing base and PIPO slots: each group runs on its own slice
// (same layers, its own weights and KV cache), and the outputs go back in
// slot order. Taps are the base group's (no PIPO consumer reads taps); a
// PIPO slot's tap rows are zero. `input_` holds the batch's hidden rows.
absl::Status StageRunner::ForwardSplit(const internal::MicroBatch& batch,
                                       const std::vector<SlotRef>& slots,
                                       const std::vector<char>& pipo, std::span<const int> taps,
                                       SliceOutput* out) {
  const int n = static_cast<int>(slots.size());
  const int64_t dim = slice_.config().dim;
  const bool first = slice_.begin() == 0;
  struct Group {
    std::vector<int> index;  // slot indices
    std::vector<SlotRef> slots;
    std::vector<int32_t> tokens;
    std::vector<float> hidden, aux_u;
    SliceOutput out;
  } group[2];
  int pipo_row = 0;  // stage 0: the PIPO rows of `hidden` in slot order
  for (int i = 0; i < n; ++i) {
    Group& g = group[pipo[i] ? 1 : 0];
    g.index.push_back(i);
    g.slots.push_back(slots[i]);
    const float* row = nullptr;
    if (!first) {
      row = input_.data() + i * dim;
    } else if (pipo[i]) {
      row = input_.data() + int64_t{pipo_row++} * dim;
    } else {
      g.tokens.push_back(batch.tokens(i));
    }
    if (row) g.hidden.insert(g.hidden.end(), row, row + dim);
    if (!pipo[i] && batch.aux_u_size() == n) g.aux_u.push_back(batch.aux_u(i));
  }
  for (int k = 0; k < 2; ++k) {
    Group& g = group[k];
    if (g.slots.empty()) continue;
    SliceInput in{g.slots, g.tokens, g.hidden, g.aux_u};
    SliceBackend& slice = k == 0 ? slice_ : *pipo_slice_;
    if (absl::Status st = slice.Forward(in, k == 0 ? taps : std::span<const int>(), &g.out);
        !st.ok()) {
      return k == 0 ? st : absl::Status(st.code(), absl::StrCat("PIPO backbone: ", st.message()));
    }
  }
  out->hidden.assign(int64_t{n} * dim, 0.0f);
  out->taps.assign(taps.size(), Tap{});
  for (size_t t = 0; t < taps.size(); ++t) {
    out->taps[t].index = taps[t];
    out->taps[t].hidden.assign(int64_t{n} * dim, 0.0f);
  }
  for (int k = 0; k < 2; ++k) {
    const Group& g = group[k];
    for (size_t j = 0; j < g.index.size(); ++j) {
      std::copy_n(g.out.hidden.data() + j * dim, dim, out->hidden.data() + g.index[j] * dim);
      for (size_t t = 0; k == 0 && t < g.out.taps.size(); ++t) {
        std::copy_n(g.out.taps[t].hidden.data() + j * dim, dim,
                    out->taps[t].hidden.data() + g.index[j] * dim);
      }
    }
  }
  return absl::OkStatus();
}

StageRunner::~StageRunner() { Stop(); }

bool StageRunner::ProducesTap(int layer) const {
  return (layer > slice_.begin() && layer <= slice_.end()) || (slice_.begin() == 0 && layer == 0);
}

void StageRunner::DropStaleSlots(internal::MicroBatch& batch) {
  const int n = batch.seq_ids_size();
  if (batch.epochs_size() != n || batch.positions_size() != n) return;  // checked below
  std::vector<int> keep;
  keep.reserve(n);
  for (int i = 0; i < n; ++i) {
    uint32_t& newest = epochs_[batch.seq_ids(i)];
    if (batch.epochs(i) < newest) continue;
    newest = batch.epochs(i);
    keep.push_back(i);
  }
  if (static_cast<int>(keep.size()) == n) return;
  stale_slots_ += n - keep.size();
  const bool first = slice_.begin() == 0;
  const size_t row = static_cast<size_t>(slice_.config().dim) * sizeof(float);
  const bool has_pipo = batch.pipo_size() == n;
  // Stage 0's hidden rows belong to its PIPO slots only.
  std::vector<int> hidden_row(n, -1);
  int rows = 0;
  for (int i = 0; i < n; ++i) {
    if (!first || (has_pipo && batch.pipo(i))) hidden_row[i] = rows++;
  }
  const bool has_hidden = rows > 0 && batch.hidden().size() == rows * row;
  std::string hidden;
  for (size_t j = 0; j < keep.size(); ++j) {
    const int i = keep[j];
    if (has_pipo) batch.set_pipo(j, batch.pipo(i));
    batch.set_seq_ids(j, batch.seq_ids(i));
    batch.set_positions(j, batch.positions(i));
    batch.set_epochs(j, batch.epochs(i));
    if (first && batch.tokens_size() == n) batch.set_tokens(j, batch.tokens(i));
    if (batch.aux_u_size() == n) batch.set_aux_u(j, batch.aux_u(i));
    if (has_hidden && hidden_row[i] >= 0) {
      hidden.append(batch.hidden().data() + hidden_row[i] * row, row);
    }
  }
  const int k = static_cast<int>(keep.size());
  batch.mutable_seq_ids()->Truncate(k);
  if (batch.positions_size() == n) batch.mutable_positions()->Truncate(k);
  batch.mutable_epochs()->Truncate(k);
  if (first && batch.tokens_size() == n) batch.mutable_tokens()->Truncate(k);
  if (batch.aux_u_size() == n) batch.mutable_aux_u()->Truncate(k);
  if (has_pipo) batch.mutable_pipo()->Truncate(k);
  if (has_hidden) batch.set_hidden(std::move(hidden));
}

void StageRunner::SendTaps(internal::MicroBatch& batch) {
  if (is_last_ || !report_ || batch.taps_size() == 0) return;
  internal::MicroBatch report;
  report.set_kind(internal::MicroBatch::TAPS);
  report.set_batch_id(batch.batch_id());
  report.set_from_stage(stage_);
  *report.mutable_seq_ids() = batch.seq_ids();
  *report.mutable_positions() = batch.positions();
  *report.mutable_epochs() = batch.epochs();
  report.mutable_taps()->Swap(batch.mutable_taps());
  if (absl::Status st = report_->Send(report.SerializeAsString()); !st.ok()) {
    // The drafter waits for these taps; the sequence falls back to plain
    // decoding for the tokens that lack them (the scheduler's rule).
    spdlog::warn("stage {}: taps of batch {} not delivered: {}", stage_, batch.batch_id(),
                 std::string(st.message()));
  }
}

bool StageRunner::Process(internal::MicroBatch& batch) {
  const auto t0 = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  // Whatever path this batch takes, the published figures follow it.
  struct Publish {
    StageRunner* self;
    ~Publish() { self->PublishStatsLocked(); }
  } publish{this};
  if (batch.kind() == internal::MicroBatch::EPOCH) {
    for (int i = 0; i < std::min(batch.seq_ids_size(), batch.epochs_size()); ++i) {
      uint32_t& newest = epochs_[batch.seq_ids(i)];
      newest = std::max(newest, batch.epochs(i));
    }
    return false;
  }
  // Releases come first and even on failed batches: a finished sequence's
  // KV must come back whatever happened to the slots travelling with it.
  for (uint64_t seq : batch.release()) {
    slice_.Release(seq);
    if (pipo_slice_) pipo_slice_->Release(seq);
    sequences_.erase(seq);
    epochs_.erase(seq);
  }
  if (!batch.error().empty()) return true;
  DropStaleSlots(batch);

  auto fail = [&](const std::string& why) {
    batch.set_error(absl::StrCat("stage ", stage_, " (layers ", slice_.begin(), ":", slice_.end(),
                                 "): ", why));
    batch.set_error_stage(stage_);
    batch.add_stage_seconds(Seconds(t0));
  };

  const int n = batch.seq_ids_size();
  const int64_t dim = slice_.config().dim;
  if (batch.positions_size() != n) {
    fail(absl::StrCat("positions has ", batch.positions_size(), " entries for ", n, " slots"));
    return true;
  }
  const bool first = slice_.begin() == 0;
  if (first && batch.tokens_size() != n) {
    fail(absl::StrCat("tokens has ", batch.tokens_size(), " entries for ", n, " slots"));
    return true;
  }
  // PIPO slots (docs/pipo.md) run on the fine-tuned backbone; on stage 0
  // their input is the compressor's z, carried in `hidden` (their rows
  // only, in slot order), not a token.
  std::vector<char> pipo(n, 0);
  int n_pipo = 0;
  if (batch.pipo_size() != 0) {
    if (batch.pipo_size() != n) {
      fail(absl::StrCat("pipo has ", batch.pipo_size(), " entries for ", n, " slots"));
      return true;
    }
    for (int i = 0; i < n; ++i) n_pipo += pipo[i] = batch.pipo(i) ? 1 : 0;
    if (n_pipo > 0 && !pipo_slice_) {
      fail("the batch has PIPO slots but this stage has no PIPO backbone (start every stage "
           "with --pipo-head)");
      return true;
    }
  }
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  const size_t hidden_bytes = static_cast<size_t>(first ? n_pipo : n) * row_bytes;
  if ((!first || n_pipo > 0) && batch.hidden().size() != hidden_bytes) {
    fail(absl::StrCat("hidden has ", batch.hidden().size(), " bytes, expected ", hidden_bytes,
                      " (", first ? n_pipo : n, " rows x dim ", dim, " fp32)"));
    return true;
  }

  std::vector<SlotRef> slots(n);
  for (int i = 0; i < n; ++i) slots[i] = {batch.seq_ids(i), batch.positions(i)};
  std::vector<int> taps;
  for (int layer : batch.tap_layers()) {
    if (ProducesTap(layer) && std::find(taps.begin(), taps.end(), layer) == taps.end()) {
      taps.push_back(layer);
    }
  }
  if (n == 0) {
    batch.add_stage_seconds(Seconds(t0));
    return true;
  }

  if (batch.aux_u_size() != 0 && batch.aux_u_size() != n) {
    fail(absl::StrCat("aux_u has ", batch.aux_u_size(), " entries for ", n, " slots"));
    return true;
  }
  // Copied out of the protobuf string: its bytes carry no float alignment.
  input_.resize(hidden_bytes / sizeof(float));
  if (hidden_bytes > 0) std::memcpy(input_.data(), batch.hidden().data(), hidden_bytes);
  SliceOutput out;
  absl::Status st;
  if (n_pipo == 0) {
    SliceInput in{slots, {}, {}, {batch.aux_u().data(), static_cast<size_t>(batch.aux_u_size())}};
    if (first) {
      in.tokens = std::span<const int32_t>(batch.tokens().data(), n);
    } else {
      in.hidden = input_;
    }
    st = slice_.Forward(in, taps, &out);
  } else {
    st = ForwardSplit(batch, slots, pipo, taps, &out);
  }
  if (!st.ok()) {
    fail(st.ToString());
    return true;
  }
  for (const SlotRef& s : slots) sequences_.insert(s.seq_id);

  batch.set_hidden(out.hidden.data(), out.hidden.size() * sizeof(float));
  for (const Tap& tap : out.taps) {
    internal::TapData* t = batch.add_taps();
    t->set_layer(tap.index);
    t->set_hidden(tap.hidden.data(), tap.hidden.size() * sizeof(float));
  }
  // Taps leave before the batch moves on, so they reach the scheduler
  // before (in-process: strictly before) the batch's result.
  SendTaps(batch);
  batch.add_stage_seconds(Seconds(t0));
  return true;
}

void StageRunner::Start(std::unique_ptr<transport::ActivationReceiver> in,
                        std::unique_ptr<transport::ActivationSender> out) {
  in_ = std::move(in);
  out_ = std::move(out);
  stop_.store(false);
  thread_ = std::thread([this] { Loop(); });
}

void StageRunner::Stop() {
  stop_.store(true);
  if (in_) in_->Shutdown();
  if (thread_.joinable()) thread_.join();
}

void StageRunner::Loop() {
  // Short timeout only so Stop is noticed even if Shutdown raced ahead.
  constexpr auto kPoll = std::chrono::milliseconds(200);
  internal::MicroBatch batch;
  while (!stop_.load()) {
    absl::StatusOr<std::string> msg = in_->Receive(kPoll);
    if (absl::IsDeadlineExceeded(msg.status())) continue;
    if (!msg.ok()) break;  // shut down
    const auto t0 = std::chrono::steady_clock::now();
    batch.Clear();
    if (!batch.ParseFromString(*msg)) {
      // Without a batch id nobody could match an error reply: drop it loudly.
      spdlog::error("stage {}: dropping a message of {} bytes that is not a MicroBatch", stage_,
                    msg->size());
      continue;
    }
    if (!Process(batch)) continue;
    batches_.fetch_add(1);
    if (observer_) observer_(batch, Seconds(t0));
    if (absl::Status st = out_->Send(batch.SerializeAsString()); !st.ok()) {
      // The next hop is down: this batch is lost; the scheduler notices the
      // missing reply and fails the affected requests.
      spdlog::warn("stage {}: batch {} not delivered: {}", stage_, batch.batch_id(),
                   std::string(st.message()));
    }
  }
}

void StageRunner::Reset(const std::string& report_address) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t seq : sequences_) {
    slice_.Release(seq);
    if (pipo_slice_) pipo_slice_->Release(seq);
  }
  sequences_.clear();
  epochs_.clear();
  report_.reset();
  PublishStatsLocked();
  if (!report_address.empty() && !is_last_) {
    auto sender = transport::Connect(report_address, data_plane_);
    if (sender.ok()) {
      report_ = *std::move(sender);
    } else {
      spdlog::warn("stage {}: cannot send taps to {}: {}", stage_, report_address,
                   sender.status().ToString());
    }
  }
}

StageStats StageRunner::Stats() const {
  StageStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = stats_;
  }
  s.batches = batches_.load();
  return s;
}

size_t StageRunner::queue_depth() const { return in_ ? in_->pending() : 0; }

}  // namespace specline
