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

StageRunner::StageRunner(SliceBackend& slice, int stage, bool is_last,
                         std::vector<WeightSet> weight_sets)
    : slice_(slice), stage_(stage), is_last_(is_last), weight_sets_(std::move(weight_sets)) {
  std::lock_guard<std::mutex> lock(mu_);
  PublishStatsLocked();
}

void StageRunner::PublishStatsLocked() {
  const PagedKvCache& kv = slice_.kv_cache();
  StageStats s;
  s.kv_capacity_tokens = int64_t{kv.shape().num_blocks} * kv.shape().block_size;
  s.kv_free_tokens = int64_t{kv.free_blocks()} * kv.shape().block_size;
  s.kv_cached_tokens = int64_t{kv.cached_blocks()} * kv.shape().block_size;
  s.kv_block_size = kv.shape().block_size;
  s.sequences = kv.num_sequences();
  s.stale_slots = stale_slots_;
  s.kv_refusals = kv_refusals_;
  s.kv_evict_mismatches = kv_evict_mismatches_;
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = s;
}

bool StageRunner::TakesHidden(const internal::MicroBatch& batch, int i) const {
  if (slice_.begin() != 0) return true;
  if (batch.weight_set_size() != batch.seq_ids_size()) return false;
  const uint32_t id = batch.weight_set(i);
  return id != 0 && id <= weight_sets_.size() && weight_sets_[id - 1].hidden_input;
}

// Taps are the base group's (no consumer of another weight set reads taps
// today); other groups' tap rows are zero. `input_` holds the batch's
// hidden rows.
absl::Status StageRunner::ForwardGroups(const internal::MicroBatch& batch,
                                        std::span<const SlotRef> slots,
                                        std::span<const int> taps, SliceOutput* out) {
  const int n = static_cast<int>(slots.size());
  const int64_t dim = slice_.config().dim;
  struct Group {
    std::vector<int> index;  // slot indices
    std::vector<SlotRef> slots;
    std::vector<int32_t> tokens;
    std::vector<float> hidden, adapter_arg;
    std::vector<uint32_t> adapter;
    SliceOutput out;
  };
  std::vector<Group> group(weight_sets_.size() + 1);
  int hidden_row = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t id = batch.weight_set(i);
    Group& g = group[id];
    g.index.push_back(i);
    g.slots.push_back(slots[i]);
    if (TakesHidden(batch, i)) {
      const float* row = input_.data() + int64_t{hidden_row++} * dim;
      g.hidden.insert(g.hidden.end(), row, row + dim);
    } else {
      g.tokens.push_back(batch.tokens(i));
    }
    if (batch.adapter_size() == n) g.adapter.push_back(batch.adapter(i));
    if (batch.adapter_arg_size() == n) g.adapter_arg.push_back(batch.adapter_arg(i));
  }
  for (size_t k = 0; k < group.size(); ++k) {
    Group& g = group[k];
    if (g.slots.empty()) continue;
    SliceInput in{g.slots, g.tokens, g.hidden, g.adapter, g.adapter_arg};
    SliceBackend& slice = k == 0 ? slice_ : *weight_sets_[k - 1].slice;
    if (absl::Status st = slice.Forward(in, k == 0 ? taps : std::span<const int>(), &g.out);
        !st.ok()) {
      return k == 0 ? st
                    : absl::Status(st.code(), absl::StrCat("weight set ", k, ": ", st.message()));
    }
  }
  out->hidden.assign(int64_t{n} * dim, 0.0f);
  out->taps.assign(taps.size(), Tap{});
  for (size_t t = 0; t < taps.size(); ++t) {
    out->taps[t].index = taps[t];
    out->taps[t].hidden.assign(int64_t{n} * dim, 0.0f);
  }
  for (size_t k = 0; k < group.size(); ++k) {
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

absl::StatusOr<PagedKvCache*> StageRunner::CacheOf(uint32_t weight_set) {
  if (weight_set == 0) return &slice_.mutable_kv_cache();
  if (weight_set > weight_sets_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("no weight set ", weight_set));
  }
  return &weight_sets_[weight_set - 1].slice->mutable_kv_cache();
}

StageRunner::~StageRunner() { Stop(); }

bool StageRunner::ProducesTap(int layer) const {
  return (layer > slice_.begin() && layer <= slice_.end()) || (slice_.begin() == 0 && layer == 0);
}

void StageRunner::DropStaleSlots(internal::MicroBatch& batch) {
  const int n = batch.seq_ids_size();
  if (batch.epochs_size() != n || batch.positions_size() != n) return;  // checked below
  std::unordered_set<uint64_t> refused;
  for (const internal::SequenceFault& f : batch.seq_faults()) refused.insert(f.seq_id());
  std::vector<int> keep;
  keep.reserve(n);
  for (int i = 0; i < n; ++i) {
    if (refused.count(batch.seq_ids(i))) continue;
    uint32_t& newest = epochs_[batch.seq_ids(i)];
    if (batch.epochs(i) < newest) {
      ++stale_slots_;
      continue;
    }
    newest = batch.epochs(i);
    keep.push_back(i);
  }
  if (static_cast<int>(keep.size()) == n) return;
  const size_t row = static_cast<size_t>(slice_.config().dim) * sizeof(float);
  std::vector<int> hidden_row(n, -1);
  int rows = 0;
  for (int i = 0; i < n; ++i) {
    if (TakesHidden(batch, i)) hidden_row[i] = rows++;
  }
  const bool has_hidden = rows > 0 && batch.hidden().size() == rows * row;
  const bool first = slice_.begin() == 0;
  // Per-slot fields are compacted only when they have one entry per slot;
  // any other size is refused by Process with the field's name.
  const bool has_tokens = first && batch.tokens_size() == n;
  const bool has_set = batch.weight_set_size() == n;
  const bool has_adapter = batch.adapter_size() == n;
  const bool has_arg = batch.adapter_arg_size() == n;
  std::string hidden;
  for (size_t j = 0; j < keep.size(); ++j) {
    const int i = keep[j];
    batch.set_seq_ids(j, batch.seq_ids(i));
    batch.set_positions(j, batch.positions(i));
    batch.set_epochs(j, batch.epochs(i));
    if (has_tokens) batch.set_tokens(j, batch.tokens(i));
    if (has_set) batch.set_weight_set(j, batch.weight_set(i));
    if (has_adapter) batch.set_adapter(j, batch.adapter(i));
    if (has_arg) batch.set_adapter_arg(j, batch.adapter_arg(i));
    if (has_hidden && hidden_row[i] >= 0) {
      hidden.append(batch.hidden().data() + hidden_row[i] * row, row);
    }
  }
  const int k = static_cast<int>(keep.size());
  batch.mutable_seq_ids()->Truncate(k);
  batch.mutable_positions()->Truncate(k);
  batch.mutable_epochs()->Truncate(k);
  if (has_tokens) batch.mutable_tokens()->Truncate(k);
  if (has_set) batch.mutable_weight_set()->Truncate(k);
  if (has_adapter) batch.mutable_adapter()->Truncate(k);
  if (has_arg) batch.mutable_adapter_arg()->Truncate(k);
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

// An EPOCH message only moves each sequence's newest epoch forward, so the
// slots the scheduler has flushed are dropped before they cost a forward.
void StageRunner::NoteEpochsLocked(const internal::MicroBatch& batch) {
  for (int i = 0; i < std::min(batch.seq_ids_size(), batch.epochs_size()); ++i) {
    uint32_t& newest = epochs_[batch.seq_ids(i)];
    newest = std::max(newest, batch.epochs(i));
  }
}

// Marks the batch failed at this stage, naming the stage and its layers so
// the scheduler's error says where in the pipeline it happened.
void StageRunner::FailBatch(internal::MicroBatch& batch, absl::string_view why,
                            std::chrono::steady_clock::time_point t0) const {
  batch.set_error(absl::StrCat("stage ", stage_, " (layers ", slice_.begin(), ":", slice_.end(),
                               "): ", why));
  batch.set_error_stage(stage_);
  batch.add_stage_seconds(Seconds(t0));
}

// Every per-slot field must have one entry per slot (the optional tags may
// also be empty), or the slice would read past a short field.
absl::Status StageRunner::CheckSlotFields(const internal::MicroBatch& batch) const {
  const int n = batch.seq_ids_size();
  if (batch.positions_size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("positions has ", batch.positions_size(), " entries for ", n, " slots"));
  }
  if (slice_.begin() == 0 && batch.tokens_size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokens has ", batch.tokens_size(), " entries for ", n, " slots"));
  }
  // Per-slot tags: empty, or one per slot.
  for (const auto& [name, size] : {std::pair<const char*, int>{"weight_set", batch.weight_set_size()},
                                   {"adapter", batch.adapter_size()},
                                   {"adapter_arg", batch.adapter_arg_size()}}) {
    if (size != 0 && size != n) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " has ", size, " entries for ", n, " slots"));
    }
  }
  return absl::OkStatus();
}

// Refuses a weight set this stage was not started with (a misconfigured
// pipeline), and says whether any slot leaves the base set, which decides
// between one forward and the grouped path.
absl::StatusOr<bool> StageRunner::UsesOtherWeightSets(const internal::MicroBatch& batch) const {
  bool grouped = false;
  for (int i = 0; i < batch.weight_set_size(); ++i) {
    const uint32_t id = batch.weight_set(i);
    if (id > weight_sets_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", i, " asks for weight set ", id, " but this stage has ",
                       weight_sets_.size(), " (start every stage with the same --weight-set)"));
    }
    grouped = grouped || id != 0;
  }
  return grouped;
}

// Validates the batch before anything runs (so a bad batch leaves the caches
// as they were) and records what the forward needs to know about it.
absl::Status StageRunner::CheckBatch(const internal::MicroBatch& batch, BatchShape* shape) const {
  if (absl::Status st = CheckSlotFields(batch); !st.ok()) return st;
  absl::StatusOr<bool> grouped = UsesOtherWeightSets(batch);
  if (!grouped.ok()) return grouped.status();
  const int n = batch.seq_ids_size();
  const int64_t dim = slice_.config().dim;
  const bool first = slice_.begin() == 0;
  int hidden_rows = 0;
  for (int i = 0; i < n; ++i) hidden_rows += TakesHidden(batch, i) ? 1 : 0;
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  const size_t hidden_bytes = static_cast<size_t>(hidden_rows) * row_bytes;
  if ((!first || hidden_rows > 0) && batch.hidden().size() != hidden_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden has ", batch.hidden().size(), " bytes, expected ", hidden_bytes, " (",
                     hidden_rows, " rows x dim ", dim, " fp32)"));
  }
  *shape = BatchShape{n, first, *grouped, hidden_bytes};
  return absl::OkStatus();
}

// The requested tap layers this stage produces, each once (see Process for
// which stage owns a boundary).
std::vector<int> StageRunner::TapsToProduce(const internal::MicroBatch& batch) const {
  std::vector<int> taps;
  for (int layer : batch.tap_layers()) {
    if (ProducesTap(layer) && std::find(taps.begin(), taps.end(), layer) == taps.end()) {
      taps.push_back(layer);
    }
  }
  return taps;
}

// Runs the slots through the slice (or, when slots ask for other weight
// sets, through each set's slice in groups), reading the batch in place.
absl::Status StageRunner::RunSlice(const internal::MicroBatch& batch, const BatchShape& shape,
                                   std::span<const SlotRef> slots, std::span<const int> taps,
                                   SliceOutput* out) {
  // Copied out of the protobuf string: its bytes carry no float alignment.
  input_.resize(shape.hidden_bytes / sizeof(float));
  if (shape.hidden_bytes > 0) std::memcpy(input_.data(), batch.hidden().data(), shape.hidden_bytes);
  if (shape.grouped) return ForwardGroups(batch, slots, taps, out);
  SliceInput in{slots,
                {},
                {},
                {batch.adapter().data(), static_cast<size_t>(batch.adapter_size())},
                {batch.adapter_arg().data(), static_cast<size_t>(batch.adapter_arg_size())}};
  if (shape.first) {
    in.tokens = std::span<const int32_t>(batch.tokens().data(), shape.n);
  } else {
    in.hidden = input_;
  }
  return slice_.Forward(in, taps, out);
}

// Replaces the batch's hidden with this stage's output and appends the taps,
// the form the next stage (or the scheduler) reads.
void StageRunner::StoreOutput(const SliceOutput& out, internal::MicroBatch& batch) {
  batch.set_hidden(out.hidden.data(), out.hidden.size() * sizeof(float));
  for (const Tap& tap : out.taps) {
    internal::TapData* t = batch.add_taps();
    t->set_layer(tap.index);
    t->set_hidden(tap.hidden.data(), tap.hidden.size() * sizeof(float));
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
    NoteEpochsLocked(batch);
    return false;
  }
  // The KV log applies even on failed batches: every stage must keep the
  // keys the scheduler believes it has, and a finished sequence's KV must
  // come back whatever happened to the slots travelling with it. It never
  // fails the batch: a disagreement refuses one sequence (stage_kv_log.cc).
  ApplyKvLogLocked(batch);
  if (!batch.error().empty()) return true;
  DropStaleSlots(batch);

  BatchShape shape;
  if (absl::Status st = CheckBatch(batch, &shape); !st.ok()) {
    FailBatch(batch, st.message(), t0);
    return true;
  }
  std::vector<SlotRef> slots(shape.n);
  for (int i = 0; i < shape.n; ++i) slots[i] = {batch.seq_ids(i), batch.positions(i)};
  const std::vector<int> taps = TapsToProduce(batch);
  if (shape.n == 0) {
    batch.add_stage_seconds(Seconds(t0));
    return true;
  }
  SliceOutput out;
  if (absl::Status st = RunSlice(batch, shape, slots, taps, &out); !st.ok()) {
    FailBatch(batch, st.ToString(), t0);
    return true;
  }
  for (const SlotRef& s : slots) sequences_.insert(s.seq_id);
  StoreOutput(out, batch);
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
    for (const WeightSet& w : weight_sets_) w.slice->Release(seq);
  }
  sequences_.clear();
  epochs_.clear();
  refused_.clear();
  // The scheduler forgets its view of the cached prefixes when it resets
  // the stages (PipelineDownLocked), so the stages forget theirs.
  slice_.mutable_kv_cache().DropCachedBlocks();
  for (const WeightSet& w : weight_sets_) w.slice->mutable_kv_cache().DropCachedBlocks();
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
