// The pipeline driver: admits requests, packs their slots into micro-batches
// for stage 0, turns what comes back from the last stage into tokens, and
// keeps the pipeline healthy. Three threads:
//   driver    builds and sends batches while fewer than max_inflight are out;
//   receiver  takes results from the last stage, computes logits for the
//             rows that need them, samples, emits, and times out lost batches;
//   health    polls every stage's GetInfo, declares the pipeline down, and
//             brings it back (Reset on every stage) when all answer again.
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
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/thread_pool.h"
#include "model/formats/model_source.h"
#include "model/runtime/device_spec.h"
#include "model/runtime/output_head.h"
#include "model/runtime/pipo_model.h"
#include "scheduler/batch_builder.h"
#include "scheduler/drafter.h"
#include "scheduler/kv_budget.h"
#include "scheduler/metrics.h"
#include "scheduler/request_stream.h"
#include "scheduler/sequence.h"
#include "scheduler/stage_control.h"
#include "specline/internal/stage.pb.h"
#include "transport/transport.h"

namespace specline::scheduler {

// When a sequence with a speculative mode may spend pipeline slots on
// drafts (docs/speculation.md "Policy").
enum class SpecPolicy {
  kNever,   // decode every sequence plainly
  kAlways,  // draft whenever the sequence has room in the pipeline
  // Draft only while fewer sequences run than micro-batches fit in the
  // pipeline (otherwise other requests fill it), and only while the
  // sequence's recent acceptance is at least min_acceptance (else one probe
  // draft every probe_interval tokens).
  kAuto,
};
const char* SpecPolicyName(SpecPolicy p);

struct SpecOptions {
  SpecPolicy policy = SpecPolicy::kAuto;
  SpecMode default_mode = SpecMode::kAutoregressive;  // for requests that do not choose
  std::string ppsd_head;  // head directory enabling PPSD ("" = none)
  std::string spd_head;   // head directory enabling SPD ("" = none)
  // PTP adapter directory enabling PTP ("" = none); every stage must run
  // the same adapter (specline-stage --ptp-head).
  std::string ptp_head;
  int ptp_n_aux = 0;  // auxiliary rows per PTP call; 0 = the adapter's N
  // PIPO head directory enabling PIPO ("" = none; not lossless, opt-in per
  // request); every stage must run its backbone (specline-stage --pipo-head).
  std::string pipo_head;
  double pipo_tau = -1;  // server default threshold; < 0 = the head's tau_default
  bool allow_oracle = false;  // accept OracleSpec (tests, benchmarks)
  double min_acceptance = 0.3;
  int probe_interval = 16;
  int max_drafts = 0;  // drafts in flight per sequence; 0 = max_inflight - 1
  // KV positions of the drafters' own caches (PPSD layer head, SPD module),
  // over all sequences; a sequence that does not fit decodes plainly.
  int draft_kv_capacity_tokens = 8192;
};

struct EngineOptions {
  BatchPolicy batch;
  int max_inflight = 0;            // micro-batches in the pipeline; 0 = one per stage
  int max_waiting = 1024;          // queued requests beyond this: RESOURCE_EXHAUSTED
  int64_t kv_capacity_tokens = 0;  // per stage; 0 = the smallest the stages report
  int kv_block_size = 16;          // must match the stages' block size
  std::chrono::milliseconds batch_timeout{10000};
  std::chrono::milliseconds health_interval{250};
  std::chrono::milliseconds health_deadline{500};
  // A request the pipeline failed under before it streamed a token lost
  // nothing: it waits this long for the pipeline to come back and restarts
  // from scratch (0 = fail it at once). At most max_attempts runs.
  std::chrono::milliseconds retry_window{5000};
  int max_attempts = 3;
  int threads = 1;  // output head (LM head matmul) and drafters
  DeviceSpec device;  // where the output head runs (cpu, or a CUDA device)
  // How the engine connects to the stages' data addresses (the cluster
  // secret; docs/security.md).
  transport::TransportOptions data_plane;
  SpecOptions spec;
};

struct EngineStats {
  int running = 0;
  int waiting = 0;
  int64_t kv_capacity_tokens = 0;
  int64_t kv_free_tokens = 0;
  int n_stages = 0;
  std::vector<bool> stage_up;
  uint64_t steps = 0;  // micro-batches that came back
  bool pipeline_up = false;
};

class Engine {
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
  absl::Status Validate(const RequestSpec& spec) const;
  // Queues a request. INVALID_ARGUMENT, RESOURCE_EXHAUSTED (waiting queue
  // full), UNAVAILABLE (pipeline down, or draining).
  absl::StatusOr<std::shared_ptr<RequestStream>> Submit(RequestSpec spec);
  // Aborts a waiting or running request (its stream ends with kAbort) and
  // schedules the release of its KV on every stage. False when unknown.
  bool Cancel(uint64_t id);

  // Draining: new requests get UNAVAILABLE; running ones continue.
  void StopAdmitting();
  int active() const;  // running + waiting

  EngineStats Stats() const;
  bool up() const;
  bool WaitUntilUp(std::chrono::milliseconds timeout) const;
  const ModelConfig& config() const { return model_->config(); }
  const std::string& model_path() const { return model_->path(); }
  int n_stages() const { return static_cast<int>(stages_.size()); }
  const std::string& inbox_address() const { return inbox_->address(); }
  // Decoding modes requests may ask for on this deployment.
  std::vector<SpecMode> modes() const;
  SpecMode default_mode() const { return options_.spec.default_mode; }

 private:
  struct InFlight {
    uint64_t generation = 0;
    Clock::time_point sent;
    std::vector<SlotRun> runs;
    int slots = 0;
  };
  using Notice = std::pair<uint64_t, uint32_t>;  // (sequence, new epoch)

  // engine.cc (locked helpers end in Locked: mu_ must be held)
  // A new attempt of `origin` (its stages' id is fresh).
  std::shared_ptr<Sequence> MakeSequenceLocked(std::shared_ptr<const RequestSpec> origin,
                                               std::shared_ptr<const PipoState> pipo);
  // `last` may carry the final token(s); its finish and error are set here.
  // The stream gets exactly one last event, whatever the caller holds.
  void FinishLocked(Sequence& seq, FinishReason reason, absl::Status error = absl::OkStatus(),
                    StreamEvent last = {});
  // Takes the sequence out of the engine (lists, KV, drafter state) without
  // touching its stream; FinishLocked and restarts share it.
  void RetireLocked(Sequence& seq);
  // Ends every waiting and running sequence with `error`, except those a
  // pipeline failure may restart (restart = true).
  void FailAllLocked(const absl::Status& error, bool restart);
  bool RestartableLocked(const Sequence& seq) const;
  // Fails the waiting restarts whose retry window has passed.
  void ExpireRestartsLocked(Clock::time_point now);
  void AdmitLocked();
  void UpdateGaugesLocked();
  void LoadDrafters();
  absl::Status ValidateSpeculation(const RequestSpec& spec) const;
  // engine_pipeline.cc
  void DriverLoop();
  bool HasWorkLocked();
  void ReceiverLoop();
  void HandleResult(internal::MicroBatch batch);
  void EmitTokenLocked(Sequence& seq, int32_t token);
  void CheckTimeoutsLocked();
  // engine_spec.cc: speculation
  Drafter* DrafterFor(SpecMode mode, bool oracle) const;
  bool WantsDraftLocked(const Sequence& s) const;
  std::vector<DraftJob> GatherDraftJobsLocked();
  void RunDrafters(std::vector<DraftJob>& jobs);
  void ApplyDraftsLocked(std::vector<DraftJob>& jobs);
  std::vector<int> TapLayersFor(const std::vector<SlotRun>& runs) const;
  void StoreTapsLocked(const internal::MicroBatch& batch);
  // Samples the next token, or verifies the oldest draft against `logits`.
  // The next verified token from the target's output: `logits`, or for a
  // greedy request without penalty just its argmax (greedy_token >= 0).
  void DecideTokenLocked(Sequence& s, std::span<const float> logits, int32_t greedy_token = -1);
  void FlushLocked(Sequence& s);
  // engine_ptp.cc: one PTP call came back. `verify_greedy` (greedy requests
  // without penalty) or `verify_logits` (vocab logits per row) are the
  // teacher rows; `aux` the auxiliary rows' argmax proposals.
  void DecidePtpCallLocked(Sequence& s, std::span<const int32_t> verify_greedy,
                           std::span<const float> verify_logits, std::span<const int32_t> aux);
  // The teacher's token after the committed tokens and `accepted` (this
  // call's proposals accepted so far) from its logits, under the request's
  // coupled sampling at the u of its generated index.
  int32_t PtpTeacherToken(const Sequence& s, std::span<const int32_t> accepted,
                          std::span<const float> logits) const;
  absl::Status PtpAvailableLocked() const;
  void LoadPtpAdapter();
  // engine_pipo.cc: a PIPO run came back with its pairs' h_b (the last
  // stage's output). Fills the MTP layer for prompt pairs and, when the run
  // ends at the newest pair, takes a step: t1, the MTP and confidence heads,
  // t2 or PAD, the next pair.
  void DecidePipoLocked(Sequence& s, const SlotRun& run, std::span<const float> h_b);
  // Pads and compresses the prompt of a PIPO request (no engine lock).
  absl::Status PreparePipo(const RequestSpec& spec, PipoState* out);
  void LoadPipoHead();
  void SendNotices(std::vector<Notice> notices);
  void ReleaseDrafterState();
  void RecordSpecFinishLocked(const Sequence& s);
  // The speculation counters of the sequence's policy (label policy=...).
  SchedulerMetrics::Spec& SpecMetrics(const Sequence& s);
  // engine_health.cc
  void HealthLoop();
  bool BringUp(const std::vector<internal::StageInfo>& infos);
  void PipelineDownLocked(const std::string& message, int stage);
  std::string StageName(int stage) const;

  std::shared_ptr<const ModelSource> model_;
  std::vector<std::unique_ptr<StageControl>> stages_;
  std::unique_ptr<transport::ActivationReceiver> inbox_;
  EngineOptions options_;
  std::shared_ptr<SchedulerMetrics> metrics_;
  std::shared_ptr<kernels::ThreadPool> pool_;
  std::unique_ptr<LogitsHead> head_;  // used by the receiver thread only

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // driver: work or capacity; up_ changes
  std::condition_variable health_cv_;
  bool stop_ = false;
  bool admitting_ = true;
  bool up_ = false;
  uint64_t generation_ = 0;  // bumped when the pipeline fails: older results are void
  uint64_t next_seq_id_ = 1;
  uint64_t next_batch_id_ = 1;
  uint64_t steps_ = 0;
  KvBudget budget_;
  std::deque<std::shared_ptr<Sequence>> waiting_;
  std::vector<std::shared_ptr<Sequence>> running_;  // admission order
  std::unordered_map<uint64_t, std::shared_ptr<RequestStream>> streams_;
  std::map<uint64_t, InFlight> inflight_;  // by batch id
  std::vector<uint64_t> releases_;         // to send on the next batch
  std::vector<bool> stage_up_;
  std::vector<std::string> stage_error_;  // the last reason a stage did not answer ("" = it did)
  std::vector<std::string> stage_data_addr_;

  std::mutex send_mu_;  // the sender is used by the driver and replaced on bring-up
  std::unique_ptr<transport::ActivationSender> sender_;

  // Speculation: drafters (shared by their sequences; used by the driver
  // thread only), drafter state to free, epoch notices to send.
  std::unique_ptr<Drafter> ppsd_, spd_, oracle_ppsd_, oracle_spd_;
  // PTP: the adapter (for N and its fingerprint, which every stage must
  // report), and why the current pipeline cannot serve it ("" = it can).
  std::shared_ptr<const DraftHead> ptp_head_;
  uint64_t ptp_fingerprint_ = 0;
  int ptp_n_aux_ = 0;
  std::string ptp_unavailable_ = "the pipeline is not up";
  // PIPO: the compressor / MTP / confidence heads (scheduler side), guarded
  // by pipo_mu_ (taken after mu_ when both are held); the stages' check.
  std::unique_ptr<PipoModel> pipo_;
  std::mutex pipo_mu_;
  uint64_t pipo_fingerprint_ = 0;
  float pipo_tau_ = 0;
  std::string pipo_unavailable_ = "the pipeline is not up";
  int max_drafts_ = 1;
  std::vector<std::pair<Drafter*, uint64_t>> drafter_releases_;
  std::vector<Notice> notices_;
  std::mutex notice_mu_;  // the senders below, replaced on bring-up
  std::vector<std::unique_ptr<transport::ActivationSender>> notice_senders_;

  std::thread driver_, receiver_, health_;
};

}  // namespace specline::scheduler
