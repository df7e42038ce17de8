// Pipeline health: the control plane of the engine. Polls every stage's
// GetInfo, tells the engine when a stage stops answering, and brings the
// pipeline back (checks the stages form one pipeline, Resets them, connects
// the data plane) once every stage answers again. It owns the stage
// controls and what the probes learnt of each stage; the engine owns the
// sequences and reacts to "down" and "up" through HealthHost.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "model/model_config.h"
#include "scheduler/stage_control.h"
#include "specline/internal/stage.pb.h"
#include "transport/transport.h"

namespace specline::scheduler {

// What a bring-up found: the shape every stage agreed on.
struct PipelineLayout {
  int64_t kv_capacity_tokens = 0;  // per stage
  int kv_block_size = 0;
};

// What pipeline health may ask of the engine it watches. The Locked calls
// run with the engine's lock held (the mutex given to PipelineHealth).
class HealthHost {
 public:
  virtual ~HealthHost() = default;
  virtual bool UpLocked() const = 0;
  // Once per probe round, also while the pipeline is down.
  virtual void ExpireRestartsLocked(std::chrono::steady_clock::time_point now) = 0;
  // A stage did not answer while the pipeline was up.
  virtual void PipelineDownLocked(const std::string& message, int stage) = 0;
  // Every stage answered, agrees with the others and was Reset: install the
  // data-plane connections and open admission. False when the engine is
  // stopping (the pipeline stays down).
  virtual bool PipelineUp(const PipelineLayout& layout,
                          const std::vector<internal::StageInfo>& infos,
                          std::unique_ptr<transport::ActivationSender> sender,
                          std::vector<std::unique_ptr<transport::ActivationSender>> notice_senders) = 0;
};

struct PipelineHealthOptions {
  std::chrono::milliseconds interval{250};  // between probe rounds
  std::chrono::milliseconds deadline{500};  // of each GetInfo and Reset
  // A stage that has never answered is still starting (loading weights)
  // until this long after Start: said at debug level only, then warned.
  std::chrono::milliseconds startup_timeout{300000};
  int64_t kv_capacity_tokens = 0;           // 0 = the smallest the stages report
  int kv_block_size = 16;                   // of a stage that reports none
  transport::TransportOptions data_plane;
  std::string inbox_address;  // where the last stage should send its output
};

class PipelineHealth {
 public:
  // `mu` is the engine's lock: it guards the per-stage state here as it
  // guards the engine's lists, so one lock orders "down" and "up".
  PipelineHealth(HealthHost& host, std::mutex& mu, const ModelConfig& config,
                 std::vector<std::unique_ptr<StageControl>> stages, PipelineHealthOptions options);
  ~PipelineHealth();
  PipelineHealth(const PipelineHealth&) = delete;
  PipelineHealth& operator=(const PipelineHealth&) = delete;

  void Start();
  // StopLocked (engine lock held) ends the probe loop at its next look,
  // waking it from its wait; Join then waits for it.
  void StopLocked() {
    stop_ = true;
    cv_.notify_all();
  }
  void Join();

  int n_stages() const { return static_cast<int>(stages_.size()); }
  // "stage 1 (127.0.0.1:50052, data 127.0.0.1:50062)": for messages.
  std::string StageName(int stage) const;
  const std::vector<bool>& stage_up_locked() const { return stage_up_; }
  // The pipeline failed, blamed on `stage` (-1: none): mark it and probe
  // for recovery at once.
  void PipelineDownLocked(int stage);

 private:
  void Loop();
  // Logs why stage i did not answer this round (mu_ held): quietly while
  // it is still starting, a warning once per reason otherwise.
  void SayWhyNotAnswering(int i, const absl::Status& status,
                          std::chrono::steady_clock::time_point now);
  bool BringUp(const std::vector<internal::StageInfo>& infos);

  HealthHost& host_;
  std::mutex& mu_;
  const ModelConfig& config_;
  std::vector<std::unique_ptr<StageControl>> stages_;
  PipelineHealthOptions options_;

  std::condition_variable cv_;  // wakes the loop early: stop, or a failure
  bool stop_ = false;
  std::vector<bool> stage_up_;
  // The last reason a stage did not answer that was said ("" = it did):
  // at warn level, and at debug level while it was still starting.
  std::vector<std::string> stage_error_, stage_starting_error_;
  std::vector<bool> stage_answered_;  // ever, since Start
  std::chrono::steady_clock::time_point started_;
  std::vector<std::string> stage_data_addr_;
  std::thread thread_;
};

}  // namespace specline::scheduler
