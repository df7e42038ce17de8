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

StageRunner::StageRunner(SliceBackend& slice, int stage, bool is_last)
    : slice_(slice), stage_(stage), is_last_(is_last) {}

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
  const bool has_hidden = !first && batch.hidden().size() == n * row;
  std::string hidden;
  for (size_t j = 0; j < keep.size(); ++j) {
    const int i = keep[j];
    batch.set_seq_ids(j, batch.seq_ids(i));
    batch.set_positions(j, batch.positions(i));
    batch.set_epochs(j, batch.epochs(i));
    if (first && batch.tokens_size() == n) batch.set_tokens(j, batch.tokens(i));
    if (has_hidden) hidden.append(batch.hidden().data() + i * row, row);
  }
  const int k = static_cast<int>(keep.size());
  batch.mutable_seq_ids()->Truncate(k);
  if (batch.positions_size() == n) batch.mutable_positions()->Truncate(k);
  batch.mutable_epochs()->Truncate(k);
  if (first && batch.tokens_size() == n) batch.mutable_tokens()->Truncate(k);
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
  const size_t hidden_bytes = static_cast<size_t>(n) * dim * sizeof(float);
  if (!first && batch.hidden().size() != hidden_bytes) {
    fail(absl::StrCat("hidden has ", batch.hidden().size(), " bytes, expected ", hidden_bytes,
                      " (", n, " slots x dim ", dim, " fp32)"));
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

  SliceInput in{slots, {}, {}};
  if (first) {
    in.tokens = std::span<const int32_t>(batch.tokens().data(), n);
  } else {
    // Copied out of the protobuf string: its bytes carry no float alignment.
    input_.resize(static_cast<size_t>(n) * dim);
    std::memcpy(input_.data(), batch.hidden().data(), hidden_bytes);
    in.hidden = input_;
  }
  SliceOutput out;
  if (absl::Status st = slice_.Forward(in, taps, &out); !st.ok()) {
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
  for (uint64_t seq : sequences_) slice_.Release(seq);
  sequences_.clear();
  epochs_.clear();
  report_.reset();
  if (!report_address.empty() && !is_last_) {
    auto sender = transport::Connect(report_address);
    if (sender.ok()) {
      report_ = *std::move(sender);
    } else {
      spdlog::warn("stage {}: cannot send taps to {}: {}", stage_, report_address,
                   sender.status().ToString());
    }
  }
}

StageStats StageRunner::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  const PagedKvCache& kv = slice_.kv_cache();
  StageStats s;
  s.kv_capacity_tokens = int64_t{kv.shape().num_blocks} * kv.shape().block_size;
  s.kv_free_tokens = int64_t{kv.free_blocks()} * kv.shape().block_size;
  s.sequences = kv.num_sequences();
  s.batches = batches_.load();
  s.stale_slots = stale_slots_;
  return s;
}

size_t StageRunner::queue_depth() const { return in_ ? in_->pending() : 0; }

}  // namespace specline
