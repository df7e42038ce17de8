// Runs micro-batches through one slice (CPU or GPU, see SliceBackend): the data-plane half of a stage
// worker, shared by the standalone process (specline-stage) and by stages
// that live inside another process (tests, the embedded mode).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/runtime/slice_backend.h"
#include "specline/internal/stage.pb.h"
#include "transport/transport.h"

namespace specline {

// A snapshot of a runner's cache, safe to take while it runs.
struct StageStats {
  int64_t kv_capacity_tokens = 0;
  int64_t kv_free_tokens = 0;  // free blocks * block size
  int64_t kv_cached_tokens = 0;  // blocks cached under a prefix key * block size
  int kv_block_size = 0;
  int sequences = 0;
  uint64_t batches = 0;
  uint64_t stale_slots = 0;  // dropped because a flush made them stale
  uint64_t kv_refusals = 0;  // sequences refused: a KV log entry did not apply
  uint64_t kv_evict_mismatches = 0;  // evicted keys not cached here or still held
};

class StageRunner {
 public:
  // Another set of weights for the same layers, with its own KV cache, that
  // slots ask for by id (MicroBatch.weight_set; id k is weight_sets[k - 1]).
  // `hidden_input`: on stage 0 its slots' input is a row of batch.hidden,
  // not a token.
  struct WeightSet {
    SliceBackend* slice = nullptr;
    bool hidden_input = false;
  };
  // stage: index in the pipeline; is_last: output goes back to the
  // scheduler (hidden of the final layer, before the final norm).
  // `slice` holds the base weights (weight set 0) and the adapters.
  StageRunner(SliceBackend& slice, int stage, bool is_last,
              std::vector<WeightSet> weight_sets = {});
  // How the runner connects to the scheduler's inbox for taps (the cluster
  // secret; docs/security.md). Set before Reset.
  void set_data_plane(transport::TransportOptions options) { data_plane_ = std::move(options); }

  // Applies batch.release, then runs the slots (tokens on stage 0, hidden
  // otherwise), replacing batch.hidden with this stage's output and
  // appending requested taps this stage can produce. On a slice error sets
  // batch.error / error_stage and leaves the caches unchanged; a batch that
  // arrives with an error is passed on untouched.
  //
  // Taps: a boundary k between two stages can be produced by both (it is
  // the output of one and the input of the next); the stage that ends
  // there produces it, so the rule is begin < k <= end, plus k == 0 on the
  // first stage. Each requested tap thus arrives exactly once. With a report
  // address (see Reset) a stage that is not the last sends its taps to the
  // scheduler at once, in a TAPS message, instead of appending them.
  //
  // Epochs (speculative flush): the runner remembers the newest epoch seen
  // per sequence, from slots and from EPOCH messages; slots with an older
  // epoch are stale and removed from the batch before it runs (the
  // scheduler has discarded them; the newer slots overwrite their KV
  // positions anyway, so dropping only saves work).
  //
  // Returns false when the message is not to be forwarded (EPOCH).
  bool Process(internal::MicroBatch& batch);

  // Receives from `in`, processes, sends to `out` until Stop().
  void Start(std::unique_ptr<transport::ActivationReceiver> in,
             std::unique_ptr<transport::ActivationSender> out);
  void Stop();
  ~StageRunner();

  // Called on the runner thread after each batch was processed and before
  // it is sent on (metrics). Set before Start.
  using Observer = std::function<void(const internal::MicroBatch&, double seconds)>;
  void set_observer(Observer observer) { observer_ = std::move(observer); }

  // Forgets every sequence (control plane; safe while running). A non-empty
  // `report_address` is where taps go from now on (ignored by the last
  // stage, whose output already goes to the scheduler).
  void Reset(const std::string& report_address = "");
  StageStats Stats() const;
  // Messages waiting in the inbox (0 before Start).
  size_t queue_depth() const;
  bool is_last() const { return is_last_; }
  int stage() const { return stage_; }

  uint64_t batches() const { return batches_.load(); }
  SliceBackend& slice() { return slice_; }

 private:
  void Loop();
  bool ProducesTap(int layer) const;
  // Removes the slots whose epoch is older than their sequence's newest,
  // and those of sequences in batch.seq_faults.
  void DropStaleSlots(internal::MicroBatch& batch);
  void SendTaps(internal::MicroBatch& batch);
  // Applies MicroBatch.kv_ops in order (stage_kv_log.cc). A sequence whose
  // entry does not apply is refused: freed here, listed in seq_faults, and
  // its slots dropped (DropStaleSlots) until the scheduler releases it.
  void ApplyKvLogLocked(internal::MicroBatch& batch);
  void ReleaseSequenceLocked(uint64_t seq);
  void RefuseSequenceLocked(internal::MicroBatch& batch, uint64_t seq, const std::string& why,
                            const google::protobuf::RepeatedField<uint64_t>& keys);
  // The cache of weight set `weight_set`.
  absl::StatusOr<PagedKvCache*> CacheOf(uint32_t weight_set);
  // Whether slot i's input is a row of batch.hidden (every slot after stage
  // 0; on stage 0 the slots of a hidden-input weight set).
  bool TakesHidden(const internal::MicroBatch& batch, int i) const;
  // Runs a batch whose slots ask for several weight sets: each group on its
  // own slice, outputs back in slot order.
  absl::Status ForwardGroups(const internal::MicroBatch& batch, std::span<const SlotRef> slots,
                             std::span<const int> taps, SliceOutput* out);
  // The steps of Process, in order (stage_runner.cc says why each exists).
  // What CheckBatch learns about a valid batch, for the forward.
  struct BatchShape {
    int n = 0;              // slots
    bool first = false;     // this stage starts at layer 0 (tokens in)
    bool grouped = false;   // some slot runs on another weight set than the base
    size_t hidden_bytes = 0;  // bytes of batch.hidden the slots read
  };
  void NoteEpochsLocked(const internal::MicroBatch& batch);
  void FailBatch(internal::MicroBatch& batch, absl::string_view why,
                 std::chrono::steady_clock::time_point t0) const;
  absl::Status CheckSlotFields(const internal::MicroBatch& batch) const;
  absl::StatusOr<bool> UsesOtherWeightSets(const internal::MicroBatch& batch) const;
  absl::Status CheckBatch(const internal::MicroBatch& batch, BatchShape* shape) const;
  std::vector<int> TapsToProduce(const internal::MicroBatch& batch) const;
  absl::Status RunSlice(const internal::MicroBatch& batch, const BatchShape& shape,
                        std::span<const SlotRef> slots, std::span<const int> taps,
                        SliceOutput* out);
  static void StoreOutput(const SliceOutput& out, internal::MicroBatch& batch);
  SliceBackend& slice_;
  int stage_;
  bool is_last_;
  std::vector<WeightSet> weight_sets_;
  std::unique_ptr<transport::ActivationReceiver> in_;
  std::unique_ptr<transport::ActivationSender> out_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> batches_{0};
  std::thread thread_;
  Observer observer_;
  // Guards the slice and `sequences_` between the runner thread and the
  // control plane (Reset). Held for a whole batch.
  mutable std::mutex mu_;
  // Stats as of the last batch or reset, published under their own lock:
  // the scheduler's health probe reads them, and must not wait for a batch
  // (a long prefill on one thread outlasted its deadline and brought the
  // pipeline down under load).
  void PublishStatsLocked();
  mutable std::mutex stats_mu_;
  StageStats stats_;
  // Sequences that may hold KV here: what Reset must release (the cache
  // does not enumerate its sequences).
  std::unordered_set<uint64_t> sequences_;
  std::unordered_map<uint64_t, uint32_t> epochs_;  // newest epoch seen per sequence
  std::unique_ptr<transport::ActivationSender> report_;  // taps to the scheduler
  uint64_t stale_slots_ = 0;
  // Sequences refused by this stage and not yet released by the scheduler,
  // with why (repeated on later batches that still carry them).
  std::unordered_map<uint64_t, std::string> refused_;
  uint64_t kv_refusals_ = 0;
  uint64_t kv_evict_mismatches_ = 0;
  std::vector<float> input_;  // aligned copy of batch.hidden
  transport::TransportOptions data_plane_;
};

}  // namespace specline
