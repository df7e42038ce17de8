// Test harness for the scheduler: n real stages (StageSlices in
// StageRunners on inproc:// transports, each with its StageWorker gRPC
// control server on a free port) driven by a real Engine, plus the
// single-process reference (LocalPipeline + Generate) to compare with.
#pragma once

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/formats/random_model.h"
#include "model/runtime/generator.h"
#include "model/runtime/local_pipeline.h"
#include "stage_worker/hosted_models.h"
#include "scheduler/engine.h"
#include "scheduler/policies/pipo.h"
#include "scheduler/policies/ptp.h"
#include "stage_worker/stage_runner.h"
#include "stage_worker/stage_service.h"
#include "tests/test_util.h"
#include "transport/transport.h"

namespace specline::testing {

using namespace std::chrono_literals;

inline ModelConfig SchedulerTestConfig() {
  ModelConfig c = LlamaShape(48, 96, 5, 4, 2, 96, 160);
  c.rope_style = RopeStyle::kInterleaved;
  return c;
}

// One random model file per test process.
inline const std::string& SchedulerTestModel() {
  static const std::string path = [] {
    std::string p = TempDir() + "/scheduler_model.gguf";
    WriteRandomModel(SchedulerTestConfig(), ModelFormat::kGguf, p, /*seed=*/11, DType::kF32);
    return p;
  }();
  return path;
}

// The same shape as a mixture-of-experts model (qwen3moe: per-head q/k
// norm, 4 experts of 64, top 2, renormalised), for the speculation suites'
// MoE cases: one file per test process.
inline const std::string& SchedulerMoeTestModel() {
  static const std::string path = [] {
    ModelConfig c = SchedulerTestConfig();
    c.arch = "qwen3moe";
    c.rope_style = RopeStyle::kHalf;
    c.qk_norm = true;
    c.n_experts = 4;
    c.n_experts_used = 2;
    c.expert_hidden_dim = 64;
    c.moe_routing = MoeRouting::kSoftmaxTopKRenorm;
    std::string p = TempDir() + "/scheduler_moe.gguf";
    WriteRandomModel(c, ModelFormat::kGguf, p, /*seed=*/11, DType::kF32);
    return p;
  }();
  return path;
}

// Deterministic prompts of a given length.
inline std::vector<int32_t> MakePrompt(int len, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> p(len);
  for (int32_t& t : p) t = static_cast<int32_t>(gen() % SchedulerTestConfig().vocab_size);
  return p;
}

struct Reference {
  std::vector<int32_t> tokens;
  std::string reason;
};

// Plain autoregressive decoding in one process: what every request must equal.
inline Reference Generate1(const ModelSource& model, const scheduler::RequestOptions& spec) {
  // A pipeline of its own each call: one kept across calls would hold the
  // first model it saw, which a test that builds a second InprocPipeline
  // has freed (a use-after-free that crashed scheduler_ptp_test).
  LocalPipeline local(model, {0, model.config().n_layers}, SliceOptions{16, 4096}, 1);
  GenerationOptions o;
  o.sampling = spec.sampling;
  o.max_tokens = spec.max_tokens;
  o.stop_ids = spec.stop_ids;
  auto r = Generate(local, 1, spec.prompt, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return {r->tokens, r->finish_reason};
}

struct StreamResult {
  std::vector<int32_t> tokens;
  std::vector<v1::TokenLogprob> logprobs;  // when the request asked for them
  scheduler::StreamEvent last;
  int events = 0;
  double queue_seconds = -1;
  int cached_prompt_tokens = 0;  // from the first event
};

// Reads a stream to its end (bounded, so a hang fails instead of blocking).
inline StreamResult Collect(scheduler::RequestStream& s) {
  StreamResult r;
  const auto give_up = std::chrono::steady_clock::now() + 300s;
  while (std::chrono::steady_clock::now() < give_up) {
    auto e = s.Next(100ms);
    if (!e) continue;
    ++r.events;
    if (r.events == 1) {
      r.queue_seconds = e->queue_seconds;
      r.cached_prompt_tokens = e->cached_prompt_tokens;
    }
    r.tokens.insert(r.tokens.end(), e->tokens.begin(), e->tokens.end());
    r.logprobs.insert(r.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
    if (e->last()) {
      r.last = *std::move(e);
      return r;
    }
  }
  ADD_FAILURE() << "stream " << s.id() << " did not end";
  return r;
}

// Reads what `streams` have sent so far without waiting: tokens per stream
// into `tokens`, and whether each has ended into `ended`. True when every
// stream has sent at least one token.
inline bool DrainStarted(const std::vector<std::shared_ptr<scheduler::RequestStream>>& streams,
                         std::vector<int>& tokens, std::vector<bool>& ended) {
  tokens.resize(streams.size(), 0);
  ended.resize(streams.size(), false);
  bool all = true;
  for (size_t i = 0; i < streams.size(); ++i) {
    while (auto e = streams[i]->Next(std::chrono::milliseconds(0))) {
      tokens[i] += static_cast<int>(e->tokens.size());
      if (e->last()) ended[i] = true;
    }
    all = all && tokens[i] > 0;
  }
  return all;
}

// Polls until `pred` holds (the pipeline works asynchronously); false after
// a generous bound. Never used to assert on timing.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::seconds bound = 60s) {
  const auto give_up = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < give_up) {
    if (pred()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return pred();
}

// Holds micro-batches at a stage, so a test can bound how far every
// sequence gets instead of racing the pipeline: each batch takes a credit,
// and without one the stage waits (before sending the batch on) until the
// test grants more or opens the gate. A decoding step needs its batch to
// pass, so with the gate closed no request can finish, and "cancel before
// it ends" or "kill a stage before it ends" is not a race. Open by default.
class BatchGate {
 public:
  // From now on only batches granted by Grant pass.
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
    credits_ = 0;
    passed_ = 0;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Grant(int64_t batches) {
    std::lock_guard<std::mutex> lock(mu_);
    credits_ += batches;
    cv_.notify_all();
  }
  // A batch is waiting at the closed gate.
  bool Waiting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_ > 0;
  }
  // Batches let through since the gate was last closed.
  int64_t passed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return passed_;
  }
  // The stage's side (its observer): blocks while closed without credit.
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.wait(lock, [&] { return open_ || credits_ > 0; });
    --waiting_;
    if (!open_) {
      --credits_;
      ++passed_;
    }
  }
  // Lets batches through one at a time, each only once the previous one has
  // been let through and the stage is waiting again, until `done()` holds;
  // returns how many were let through (-1 if `done` did not hold within a
  // generous bound: a hang, never a timing assumption). The gate stays
  // closed. Use it to bring every sequence to a point (its first token, say)
  // while knowing no sequence advanced by more steps than that.
  template <typename Pred>
  int64_t StepUntil(Pred done, std::chrono::seconds bound = std::chrono::seconds(120)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = false;
      credits_ = 0;
      passed_ = 0;
    }
    const auto give_up = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < give_up) {
      if (done()) {
        std::lock_guard<std::mutex> lock(mu_);
        return passed_;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (waiting_ > 0 && credits_ == 0) {
          credits_ = 1;
          cv_.notify_all();
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return -1;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int64_t credits_ = 0;
  int waiting_ = 0;
  int64_t passed_ = 0;  // through the closed gate
};

class InprocPipeline {
 public:
  static constexpr int kStageKvTokens = 4096;
  // Replaces stage i's slice by a wrapper around it (null: keep it), e.g. a
  // deliberately broken stage for a negative control.
  using SliceWrapper =
      std::function<std::unique_ptr<SliceBackend>(int stage, SliceBackend& slice)>;

  // `stage_delay` > 0 makes every stage hold each batch that long before
  // sending it on, like a stage of a bigger model. Tests that must see
  // drafts use it: on the tiny test model a token can come back before the
  // driver has drafted behind it, so without it whether any draft is sent
  // depends on how busy the machine is.
  //
  // `model_path` ("" = the random test model); with a PTP head (PtpOptions)
  // every stage loads that PTP adapter, with a PIPO head (PipoOptions) that
  // PIPO head's backbone, unless `heads_on_stages` is false.
  InprocPipeline(int n_stages, scheduler::EngineOptions options,
                 int stage_kv_tokens = kStageKvTokens,
                 std::chrono::microseconds stage_delay = 0us, const std::string& model_path = "",
                 bool heads_on_stages = true, const SliceWrapper& wrap_slice = {})
      : model_(OpenModel(model_path.empty() ? SchedulerTestModel() : model_path)) {
    static std::atomic<int> counter{0};
    prefix_ = "sched-test-" + std::to_string(counter++);
    const std::vector<int> bounds = EvenSplit(model_->config().n_layers, n_stages);
    SliceOptions slice_options{16, stage_kv_tokens};
    // The stages host the policies' models as specline-stage would with
    // --adapter / --weight-set.
    std::vector<std::string> adapter_dirs, weight_set_dirs;
    if (heads_on_stages && !options.spec.Of<scheduler::PtpOptions>().head.empty()) {
      adapter_dirs.push_back(options.spec.Of<scheduler::PtpOptions>().head);
    }
    if (heads_on_stages && !options.spec.Of<scheduler::PipoOptions>().head.empty()) {
      weight_set_dirs.push_back(options.spec.Of<scheduler::PipoOptions>().head);
    }
    absl::StatusOr<LoadedAddOns> addons =
        LoadAddOns(adapter_dirs, weight_set_dirs, model_->config());
    if (!addons.ok()) throw std::invalid_argument(addons.status().ToString());
    slice_options.adapters = addons->adapters;
    weight_set_models_ = std::move(addons->weight_sets);
    const HostedModels hosted = addons->info;
    for (int i = 0; i < n_stages; ++i) {
      auto pool = std::make_shared<kernels::ThreadPool>(1);
      slices_.push_back(std::make_unique<StageSlice>(*model_, bounds[i], bounds[i + 1],
                                                     slice_options, pool));
      std::vector<StageRunner::WeightSet> weight_sets;
      for (size_t k = 0; k < weight_set_models_.size(); ++k) {
        SliceOptions set_options{16, stage_kv_tokens};
        set_options.hidden_input = hosted.weight_sets[k].hidden_input();
        weight_set_slices_.push_back(std::make_unique<StageSlice>(
            *weight_set_models_[k], bounds[i], bounds[i + 1], set_options, pool));
        weight_sets.push_back({weight_set_slices_.back().get(), set_options.hidden_input});
      }
      SliceBackend* slice = slices_.back().get();
      if (wrap_slice) {
        if (auto wrapped = wrap_slice(i, *slice)) {
          wrapped_slices_.push_back(std::move(wrapped));
          slice = wrapped_slices_.back().get();
        }
      }
      runners_.push_back(
          std::make_unique<StageRunner>(*slice, i, i == n_stages - 1, std::move(weight_sets)));
      // Stage 0 passes every batch through the gate (open unless a test
      // closes it).
      BatchGate* gate = i == 0 ? gate_.get() : nullptr;
      runners_.back()->set_observer([stage_delay, gate](const internal::MicroBatch&, double) {
        if (stage_delay > 0us) std::this_thread::sleep_for(stage_delay);
        if (gate) gate->Pass();
      });
    }
    auto inbox = transport::Listen(InboxAddress());
    EXPECT_TRUE(inbox.ok()) << inbox.status();
    std::vector<std::unique_ptr<scheduler::StageControl>> controls;
    for (int i = 0; i < n_stages; ++i) {
      StartRunner(i);
      services_.push_back(std::make_unique<StageServiceImpl>(
          std::vector<StageRunner*>{runners_[i].get()}, DataAddress(i), NextAddress(i), hosted));
      ports_.push_back(0);
      StartControl(i);
      controls.push_back(
          scheduler::ConnectStageControl("127.0.0.1:" + std::to_string(ports_[i])));
    }
    // A stage that is stopped here refuses connections at once, so a long
    // GetInfo deadline costs no detection; a short one could call a stage
    // of a busy (or sanitizer-slowed) machine down while it is fine.
    options.health_deadline = std::max(options.health_deadline, std::chrono::milliseconds(3000));
    engine_ = std::make_unique<scheduler::Engine>(model_, std::move(controls), *std::move(inbox),
                                                  options);
    engine_->Start();
    EXPECT_TRUE(engine_->WaitUntilUp(60s)) << "the pipeline did not come up";
  }

  ~InprocPipeline() {
    gate_->Open();  // a stage waiting at the gate could not stop
    engine_->Stop();
    for (auto& r : runners_) r->Stop();
    for (auto& s : servers_) {
      if (s) s->Shutdown(std::chrono::system_clock::now());
    }
  }

  scheduler::Engine& engine() { return *engine_; }
  const ModelSource& model() const { return *model_; }
  StageRunner& runner(int i) { return *runners_[i]; }
  // Stage 0's gate: every micro-batch passes it before going on.
  BatchGate& gate() { return *gate_; }
  int n_stages() const { return static_cast<int>(runners_.size()); }

  // The data plane of stage i dies (its control server still answers).
  void StopRunner(int i) { runners_[i]->Stop(); }
  void StartRunner(int i) {
    auto in = transport::Listen(DataAddress(i));
    auto out = transport::Connect(NextAddress(i));
    ASSERT_TRUE(in.ok()) << in.status();
    ASSERT_TRUE(out.ok()) << out.status();
    runners_[i]->Start(*std::move(in), *std::move(out));
  }
  // The control plane of stage i goes away / comes back on the same port.
  void StopControl(int i) {
    servers_[i]->Shutdown(std::chrono::system_clock::now());
    servers_[i]->Wait();
    servers_[i].reset();
  }
  void StartControl(int i) {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:" + std::to_string(ports_[i]),
                       grpc::InsecureServerCredentials(), &port);
    b.RegisterService(services_[i].get());
    if (static_cast<int>(servers_.size()) <= i) servers_.resize(i + 1);
    servers_[i] = b.BuildAndStart();
    ASSERT_TRUE(servers_[i] && port > 0) << "cannot start stage " << i << "'s control server";
    ports_[i] = port;
  }

  // Every stage holds no sequence's KV any more (the releases went
  // through): what is not free is cached prefix blocks, exactly those the
  // scheduler believes cached.
  bool StagesEmpty() {
    const int64_t cached = engine_->Stats().kv_cached_tokens;
    for (auto& r : runners_) {
      StageStats s = r->Stats();
      if (s.kv_free_tokens + s.kv_cached_tokens != s.kv_capacity_tokens || s.sequences != 0 ||
          s.kv_cached_tokens != cached) {
        return false;
      }
    }
    return true;
  }

 private:
  std::string DataAddress(int i) const { return "inproc://" + prefix_ + "-stage" + std::to_string(i); }
  std::string InboxAddress() const { return "inproc://" + prefix_ + "-scheduler"; }
  std::string NextAddress(int i) const {
    return i + 1 == n_stages() ? InboxAddress() : DataAddress(i + 1);
  }

  std::shared_ptr<const ModelSource> model_;
  std::unique_ptr<BatchGate> gate_ = std::make_unique<BatchGate>();
  std::string prefix_;
  std::vector<std::unique_ptr<StageSlice>> slices_;
  std::vector<std::unique_ptr<SliceBackend>> wrapped_slices_;
  std::vector<std::unique_ptr<ModelSource>> weight_set_models_;  // by weight-set id - 1
  std::vector<std::unique_ptr<StageSlice>> weight_set_slices_;
  std::vector<std::unique_ptr<StageRunner>> runners_;
  std::vector<std::unique_ptr<StageServiceImpl>> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::vector<int> ports_;
  std::unique_ptr<scheduler::Engine> engine_;
};

}  // namespace specline::testing
