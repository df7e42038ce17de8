// The pipeline driver: admits requests, packs their slots into micro-batches
// for stage 0, turns what comes back from the last stage into tokens, and
// keeps the pipeline healthy. Three threads:
//   driver    builds and sends batches while fewer than max_inflight are out;
//   receiver  takes results from the last stage, computes logits for the
//             rows that need them, samples, emits, and times out lost batches;
//   health    polls every stage's GetInfo, declares the pipeline down, and
//             brings it back (Reset on every stage) when all answer again
//             (PipelineHealth, scheduler/pipeline_health.h).
// All sequence state is guarded by one mutex; logits are computed outside it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/thread_pool.h"
#include "model/formats/model_source.h"
#include "model/runtime/device_config.h"
#include "model/runtime/output_head.h"
#include "scheduler/admission_queue.h"
#include "scheduler/batch_limits.h"
#include "scheduler/call_cost_curve.h"
#include "scheduler/decoding_policy.h"
#include "scheduler/kv_budget.h"
#include "scheduler/metrics.h"
#include "scheduler/pipeline_health.h"
#include "scheduler/prefix_cache.h"
#include "scheduler/policies/resources.h"
#include "scheduler/policy_host.h"
#include "scheduler/request_stream.h"
#include "scheduler/sequence.h"
#include "scheduler/slot_run.h"
#include "scheduler/stage_control.h"
#include "specline/internal/stage.pb.h"
#include "transport/transport.h"

namespace specline::scheduler {

// The payload Submit's RESOURCE_EXHAUSTED carries: the flag whose limit
// refused the request ("max-waiting", "max-kv-blocks-per-tenant"), which the
// Scheduler service hands on as `specline-limit` trailing metadata.
inline constexpr char kLimitPayload[] = "type.specline.dev/limit";

struct EngineOptions {
  BatchLimits batch;
  int max_inflight = 0;            // micro-batches in the pipeline; 0 = one per stage
  int max_waiting = 1024;          // queued requests beyond this: RESOURCE_EXHAUSTED
  // The order admission takes waiting requests in: fair across tenants
  // (round robin) or first come, first served (scheduler/admission_queue.h).
  AdmissionPolicy admission = AdmissionPolicy::kFair;
  // KV blocks one tenant's running requests may hold together, counted as
  // admission counts them (each one's worst case); 0 = no limit. A request
  // needing more alone is refused (RESOURCE_EXHAUSTED); a tenant at its
  // limit waits while other tenants are admitted.
  int64_t max_kv_blocks_per_tenant = 0;
  int64_t kv_capacity_tokens = 0;  // per stage; 0 = the smallest the stages report
  // Block size of the scheduler's own caches (drafters, PIPO's MTP layer).
  // Admission counts in the stages' blocks, which they report (StageInfo).
  int kv_block_size = 16;
  std::chrono::milliseconds batch_timeout{10000};
  std::chrono::milliseconds health_interval{250};
  std::chrono::milliseconds health_deadline{500};
  // Stages that have not answered yet are waited for quietly this long
  // after start (they load their weights), then warned about.
  std::chrono::seconds stage_startup_timeout{300};
  // A request the pipeline failed under before it streamed a token lost
  // nothing: it waits this long for the pipeline to come back and restarts
  // from scratch (0 = fail it at once). At most max_attempts runs.
  std::chrono::milliseconds retry_window{5000};
  int max_attempts = 3;
  // Automatic prefix caching (docs/prefix_caching.md): requests whose
  // prompts start alike reuse the stages' KV of the common full blocks.
  bool prefix_caching = true;
  // Where the prefix cache records its KV events for routers (not owned;
  // null = none: --kv-events-config unset). scheduler/kv_events.h.
  KvEventLog* kv_events = nullptr;
  int threads = 1;  // output head (LM head matmul) and drafters
  DeviceConfig device;  // where the output head runs (cpu, or a CUDA device)
  // How the engine connects to the stages' data addresses (the cluster
  // secret; docs/security.md).
  transport::TransportOptions data_plane;
  SpecOptions spec;
};

struct EngineStats {
  int running = 0;
  int waiting = 0;
  int64_t kv_capacity_tokens = 0;
  int64_t kv_free_tokens = 0;    // free, or cached and evictable
  int64_t kv_cached_tokens = 0;  // in blocks cached under a prefix key
  int kv_block_size = 0;         // positions per block (capacity is whole blocks)
  // Prompt tokens of requests that could use the prefix cache, and of
  // those, the ones found cached (vLLM's prefix_cache_queries / _hits).
  uint64_t prefix_cache_queries = 0;
  uint64_t prefix_cache_hits = 0;
  int n_stages = 0;
  std::vector<bool> stage_up;
  uint64_t steps = 0;  // micro-batches that came back
  uint64_t admitted = 0;  // admissions so far (restarts count again)
  bool pipeline_up = false;
  uint64_t pipeline_failures = 0;  // times the pipeline went down
  uint64_t kv_refusals = 0;        // requests failed alone by a stage's refusal
};

class Engine : private PolicyHost, private HealthHost {
 public:
  // `model` supplies the config and the output head (final norm + LM head;
  // no layer is touched). `stages` in pipeline order; `inbox` is where the
  // last stage sends its output. `metrics` may be null.
  Engine(std::shared_ptr<const ModelSource> model,
         std::vector<std::unique_ptr<StageControl>> stages,
         std::unique_ptr<transport::ActivationReceiver> inbox, EngineOptions options,
         std::shared_ptr<SchedulerMetrics> metrics = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void Start();
  void Stop();  // fails what still runs (UNAVAILABLE) and joins the threads

  // Checks a request against the model: INVALID_ARGUMENT naming the field.
  absl::Status Validate(const RequestOptions& spec) const;
  // Queues a request. INVALID_ARGUMENT, RESOURCE_EXHAUSTED (waiting queue
  // full), UNAVAILABLE (pipeline down, or draining).
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(RequestOptions spec);
  // Aborts a waiting or running request (its stream ends with kAbort) and
  // schedules the release of its KV on every stage. False when unknown.
  bool Cancel(uint64_t id);

  // Draining: new requests get UNAVAILABLE; running ones continue.
  void StopAdmitting();
  int active() const;  // running + waiting

  EngineStats Stats() const;
  bool up() const;
  bool WaitUntilUp(std::chrono::milliseconds timeout) const;
  const ModelConfig& config() const override { return model_->config(); }
  const std::string& model_path() const { return model_->path(); }
  int n_stages() const override { return health_->n_stages(); }
  const std::string& inbox_address() const { return inbox_->address(); }
  // Decoding modes requests may ask for on this deployment.
  std::vector<v1::DecodingPolicy> modes() const;
  v1::DecodingPolicy default_mode() const { return options_.spec.default_mode; }

 private:
  struct InFlight {
    uint64_t generation = 0;
    Clock::time_point sent;
    std::vector<SlotRun> runs;
    int slots = 0;
  };
  using Notice = std::pair<uint64_t, uint32_t>;  // (sequence, new epoch)

  // PolicyHost (what the decoding policies may ask of the engine).
  int max_inflight() const override { return options_.max_inflight; }
  int RunningLocked() const override { return static_cast<int>(running_.size()); }
  // DecodingPolicy::DecideLocked, with an exception ending only that request.
  void DecideOrFailLocked(Sequence& s, const SlotRun& run, const RunOutput& out);
  void EmitTokenLocked(Sequence& seq, int32_t token, std::span<const float> row) override;
  void FinishLocked(Sequence& seq, FinishReason reason, absl::Status error) override {
    FinishLocked(seq, reason, std::move(error), StreamEvent{});
  }
  void NoticeEpochLocked(const Sequence& seq) override { notices_.emplace_back(seq.id, seq.epoch); }
  SchedulerMetrics::Spec& SpecMetrics(const std::string& policy) override {
    return metrics_->ForPolicy(policy);
  }
  std::string StageName(int stage) const override { return health_->StageName(stage); }
  double CallCost(int rows) const override { return call_cost_.Relative(rows); }

  // HealthHost (how pipeline health reports to the engine).
  bool UpLocked() const override { return up_; }
  // Fails the waiting restarts whose retry window has passed.
  void ExpireRestartsLocked(Clock::time_point now) override;
  // Fails (or holds for a restart) everything the lost pipeline computed.
  void PipelineDownLocked(const std::string& message, int stage) override;
  bool PipelineUp(const PipelineLayout& layout, const std::vector<internal::StageInfo>& infos,
                  std::unique_ptr<transport::ActivationSender> sender,
                  std::vector<std::unique_ptr<transport::ActivationSender>> notice_senders) override;

  // engine.cc (locked helpers end in Locked: mu_ must be held)
  DecodingPolicy* PolicyFor(v1::DecodingPolicy mode) const;
  // A new attempt of `origin` (its stages' id is fresh) under its policy,
  // from what the policy prepared for it.
  std::shared_ptr<Sequence> MakeSequenceLocked(std::shared_ptr<const RequestOptions> origin,
                                               std::shared_ptr<const PreparedRequest> prepared);
  // `last` may carry the final token(s); its finish and error are set here.
  // The stream gets exactly one last event, whatever the caller holds.
  void FinishLocked(Sequence& seq, FinishReason reason, absl::Status error, StreamEvent last);
  // Takes the sequence out of the engine (lists, KV, policy state) without
  // touching its stream; FinishLocked and restarts share it.
  void RetireLocked(Sequence& seq);
  // Ends every waiting and running sequence with `error`, except those a
  // pipeline failure may restart (restart = true).
  void FailAllLocked(const absl::Status& error, bool restart);
  bool RestartableLocked(const Sequence& seq) const;
  // Takes waiting sequences in the admission queue's order while their KV
  // fits (scheduler/admission_queue.h).
  void AdmitLocked();
  // Whether `seq`'s tenant may hold its KV on top of what it holds now.
  bool WithinTenantQuotaLocked(const Sequence& seq) const;
  // engine_prefix.cc: admission's KV reservation, with the prefix cache
  // when the sequence can use it (false: it does not fit yet), the
  // publication of the blocks that became final, and the cache lists of the
  // next batch.
  bool ReserveKvLocked(Sequence& s);
  void PublishFinalBlocksLocked(Sequence& s, int32_t computed_end);
  void ReleasePrefixLocked(Sequence& s);
  // The KV log (MicroBatch.kv_ops): every decision on the stages' KV, in
  // the order taken, for the next batch. Evicting returns the blocks to the
  // budget.
  void LogReleaseLocked(uint64_t seq_id);
  void EvictLocked(const std::vector<PrefixCache::Evicted>& evicted);
  void WriteKvLogLocked(internal::MicroBatch& batch);
  // A stage refused the sequence (MicroBatch.seq_faults): fail it alone.
  void RefuseSequenceLocked(const internal::SequenceFault& fault);
  // The stages were (or will be) reset: they forget every key, so do we.
  void ClearPrefixCacheLocked(int block_size);
  void UpdateGaugesLocked();
  void RecordSpecFinishLocked(const Sequence& s);
  // engine_pipeline.cc
  void DriverLoop();
  bool HasWorkLocked();
  // Builds the next micro-batch from the running sequences (false: nothing
  // to send).
  bool BuildBatchLocked(internal::MicroBatch& batch, uint64_t& generation);
  void ReceiverLoop();
  void HandleResult(internal::MicroBatch batch);
  // HandleResult's steps under the lock: the batch's in-flight record
  // (nullopt: a batch from before a failure, its sequences released); false
  // when the batch failed or came back malformed (the pipeline is down);
  // the stages' refusals, taps and completed blocks.
  std::optional<InFlight> TakeInFlightLocked(const internal::MicroBatch& batch);
  bool CheckResultLocked(const internal::MicroBatch& batch, const InFlight& f);
  void RecordResultLocked(const internal::MicroBatch& batch, const InFlight& f);
  void CheckTimeoutsLocked();
  void StoreTapsLocked(const internal::MicroBatch& batch);
  void SendNotices(std::vector<Notice> notices);

  std::shared_ptr<const ModelSource> model_;
  std::unique_ptr<transport::ActivationReceiver> inbox_;
  EngineOptions options_;
  std::shared_ptr<SchedulerMetrics> metrics_;
  std::shared_ptr<kernels::ThreadPool> pool_;
  std::unique_ptr<LogitsHead> head_;  // used by the receiver thread only

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // driver: work or capacity; up_ changes
  bool stop_ = false;
  bool admitting_ = true;
  bool up_ = false;
  uint64_t generation_ = 0;  // bumped when the pipeline fails: older results are void
  uint64_t next_seq_id_ = 1;
  uint64_t next_batch_id_ = 1;
  uint64_t steps_ = 0;
  KvBudget budget_;
  AdmissionQueue waiting_;
  // KV blocks (worst case, as admitted) each tenant's running sequences
  // hold; a tenant leaves the map at zero.
  std::unordered_map<std::string, int64_t> tenant_kv_blocks_;
  uint64_t admitted_ = 0;
  std::vector<std::shared_ptr<Sequence>> running_;  // admission order
  std::unordered_map<uint64_t, std::shared_ptr<RequestStream>> streams_;
  std::map<uint64_t, InFlight> inflight_;  // by batch id
  CallCostCurve call_cost_;  // measured from every returned call
  double tokens_per_run_ = 1.0;  // tokens a deciding run yields per call (EMA, mu_)
  // The scheduler's view of the stages' prefix cache, and the KV log for
  // the next batch (releases, publications, attachments, evictions).
  PrefixCache prefix_;
  std::vector<internal::KvOp> kv_log_;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
  uint64_t pipeline_failures_ = 0, kv_refusals_ = 0;

  std::mutex send_mu_;  // the sender is used by the driver and replaced on bring-up
  std::unique_ptr<transport::ActivationSender> sender_;

  // The decoding policies this deployment serves (policies/registry.h),
  // and the epoch notices their flushes ask for, to send to every stage.
  std::vector<std::unique_ptr<DecodingPolicy>> policies_;
  std::vector<Notice> notices_;
  std::mutex notice_mu_;  // the senders below, replaced on bring-up
  std::vector<std::unique_ptr<transport::ActivationSender>> notice_senders_;

  std::thread driver_, receiver_;
  // The stages' control plane and the health thread; uses mu_, so it is
  // declared after it (and destroyed before it).
  std::unique_ptr<PipelineHealth> health_;
};

}  // namespace specline::scheduler
