// Stage workers: StageRunner chained over 2 and 3 slices reproduces
// LocalPipeline exactly (hidden states and taps, each tap once), releases
// free KV, errors carry the stage and leave caches alone; runners on
// in-process transports in threads; and specline-stage processes chained
// over TCP, with their gRPC control service and SIGTERM shutdown.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <fstream>

#include "common/listen_error.h"
#include "model/formats/random_model.h"
#include "model/runtime/local_pipeline.h"
#include "specline/internal/stage.grpc.pb.h"
#include "stage_worker/stage_flags.h"
#include "stage_worker/stage_runner.h"
#include "tests/process_util.h"
#include "tests/test_util.h"
#include "transport/transport.h"
#ifdef SPECLINE_HAVE_CUDA
#include "kernels/cuda/device_buffer.h"
#endif

namespace specline {
namespace {

using internal::MicroBatch;
using std::chrono::milliseconds;

ModelConfig SmallConfig() { return LlamaShape(48, 96, 5, 4, 2, 96, 128); }

struct Slot {
  uint64_t seq;
  int32_t pos;
  int32_t token;
};

MicroBatch MakeBatch(uint64_t id, const std::vector<Slot>& slots, std::vector<int> taps = {}) {
  MicroBatch b;
  b.set_batch_id(id);
  for (const Slot& s : slots) {
    b.add_seq_ids(s.seq);
    b.add_positions(s.pos);
    b.add_epochs(0);
    b.add_tokens(s.token);
  }
  for (int t : taps) b.add_tap_layers(t);
  return b;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// The same slots through the in-process reference.
SliceOutput Reference(LocalPipeline& p, const std::vector<Slot>& slots,
                      const std::vector<int>& taps) {
  std::vector<SlotRef> refs;
  std::vector<int32_t> tokens;
  for (const Slot& s : slots) {
    refs.push_back({s.seq, s.pos});
    tokens.push_back(s.token);
  }
  SliceOutput out;
  absl::Status st = p.Forward(refs, tokens, taps, &out);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

// Checks a processed batch against the reference: hidden bit-exact, each
// distinct requested tap present exactly once and bit-exact.
void ExpectMatches(const MicroBatch& b, const SliceOutput& ref, const std::vector<int>& taps) {
  ASSERT_TRUE(b.error().empty()) << b.error();
  EXPECT_EQ(Floats(b.hidden()), ref.hidden);
  std::vector<int> distinct;
  for (int t : taps) {
    if (std::find(distinct.begin(), distinct.end(), t) == distinct.end()) distinct.push_back(t);
  }
  ASSERT_EQ(b.taps_size(), static_cast<int>(distinct.size()));
  for (const internal::TapData& tap : b.taps()) {
    auto it = std::find(taps.begin(), taps.end(), tap.layer());
    ASSERT_NE(it, taps.end()) << "unrequested tap " << tap.layer();
    EXPECT_EQ(Floats(tap.hidden()), ref.taps[it - taps.begin()].hidden) << "tap " << tap.layer();
  }
}

// A prompt of `n` tokens for sequence `seq` starting at `start`.
std::vector<Slot> Prompt(uint64_t seq, int32_t start, int n) {
  std::vector<Slot> s;
  for (int i = 0; i < n; ++i) s.push_back({seq, start + i, int32_t((seq * 31 + i * 7) % 96)});
  return s;
}

std::vector<Slot> Concat(std::vector<Slot> a, const std::vector<Slot>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class StageWorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = testing::TempDir() + "/small.gguf";
    WriteRandomModel(SmallConfig(), ModelFormat::kGguf, path_, /*seed=*/11, DType::kF32);
    model_ = OpenModel(path_).release();
  }
  static void TearDownTestSuite() { delete model_; }

  // Slices and runners for `bounds`, sharing one single-threaded pool.
  void Build(const std::vector<int>& bounds) {
    pool_ = std::make_shared<kernels::ThreadPool>(1);
    SliceOptions opt;
    opt.kv_capacity_tokens = 256;
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      slices_.push_back(std::make_unique<StageSlice>(*model_, bounds[i], bounds[i + 1], opt, pool_));
      runners_.push_back(std::make_unique<StageRunner>(*slices_.back(), int(i),
                                                       i + 2 == bounds.size()));
    }
    reference_ = std::make_unique<LocalPipeline>(*model_, bounds, opt, 1);
  }
  void ProcessAll(MicroBatch& b) {
    for (auto& r : runners_) r->Process(b);
  }

  static std::string path_;
  static ModelSource* model_;
  std::shared_ptr<kernels::ThreadPool> pool_;
  std::vector<std::unique_ptr<StageSlice>> slices_;
  std::vector<std::unique_ptr<StageRunner>> runners_;
  std::unique_ptr<LocalPipeline> reference_;
};
std::string StageWorkerTest::path_;
ModelSource* StageWorkerTest::model_ = nullptr;

TEST_F(StageWorkerTest, ChainedRunnersMatchLocalPipeline) {
  for (const std::vector<int>& bounds : {std::vector<int>{0, 2, 5}, std::vector<int>{0, 1, 3, 5}}) {
    SCOPED_TRACE(::testing::PrintToString(bounds));
    slices_.clear();
    runners_.clear();
    Build(bounds);
    // Prefill of two sequences in one batch, then decode steps of both;
    // taps at every boundary (and one twice).
    const std::vector<int> taps = {0, 1, 2, 3, 5, 2, 4};
    std::vector<std::vector<Slot>> steps = {Concat(Prompt(1, 0, 6), Prompt(2, 0, 4)),
                                            {{1, 6, 40}, {2, 4, 41}},
                                            {{2, 5, 42}, {1, 7, 43}}};
    for (size_t i = 0; i < steps.size(); ++i) {
      MicroBatch b = MakeBatch(i, steps[i], taps);
      ProcessAll(b);
      EXPECT_EQ(b.stage_seconds_size(), static_cast<int>(runners_.size()));
      ExpectMatches(b, Reference(*reference_, steps[i], taps), taps);
    }
  }
}

TEST_F(StageWorkerTest, ReleaseFreesKvEvenInAnEmptyBatch) {
  Build({0, 2, 5});
  std::vector<int> free_before;
  for (auto& s : slices_) free_before.push_back(s->kv_cache().free_blocks());
  MicroBatch b = MakeBatch(1, Concat(Prompt(1, 0, 20), Prompt(2, 0, 3)));
  ProcessAll(b);
  ASSERT_TRUE(b.error().empty()) << b.error();
  for (auto& s : slices_) EXPECT_EQ(s->Length(1), 20);

  MicroBatch release = MakeBatch(2, {});
  release.add_kv_ops()->set_release(1);
  ProcessAll(release);
  EXPECT_EQ(release.stage_seconds_size(), 2);
  for (auto& s : slices_) {
    EXPECT_EQ(s->Length(1), 0);
    EXPECT_EQ(s->Length(2), 3);
  }
  for (auto& r : runners_) r->Reset();
  for (size_t i = 0; i < slices_.size(); ++i) {
    EXPECT_EQ(slices_[i]->kv_cache().free_blocks(), free_before[i]);
    EXPECT_EQ(runners_[i]->Stats().kv_free_tokens, runners_[i]->Stats().kv_capacity_tokens);
  }
}

// A slice whose Forward waits until the test lets it go, so a batch can be
// held in flight deterministically.
class HeldSlice : public SliceBackend {
 public:
  explicit HeldSlice(SliceBackend& inner) : inner_(inner) {}
  int begin() const override { return inner_.begin(); }
  int end() const override { return inner_.end(); }
  const ModelConfig& config() const override { return inner_.config(); }
  std::string device() const override { return inner_.device(); }
  absl::Status Forward(const SliceInput& in, std::span<const int> taps, SliceOutput* out) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      entered_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return released_; });
    }
    return inner_.Forward(in, taps, out);
  }
  void Truncate(uint64_t seq, int32_t length) override { inner_.Truncate(seq, length); }
  void Release(uint64_t seq) override { inner_.Release(seq); }
  int32_t Length(uint64_t seq) const override { return inner_.Length(seq); }
  const PagedKvCache& kv_cache() const override { return inner_.kv_cache(); }
  PagedKvCache& mutable_kv_cache() override { return inner_.mutable_kv_cache(); }
  // False when no batch entered Forward within `limit`.
  bool WaitEntered(std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return entered_; });
  }
  void Let() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  SliceBackend& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, released_ = false;
};

// The scheduler's health probe reads Stats: it must answer while a batch is
// in flight (a long prefill once outlasted the probe's deadline and the
// pipeline was declared down). Stats is asked on its own thread and given a
// bounded time, so that bug coming back fails here instead of hanging until
// ctest's timeout; the batch is then let go, which frees Stats too.
TEST_F(StageWorkerTest, StatsAnswerWhileABatchIsInFlight) {
  Build({0, 5});
  HeldSlice held(*slices_[0]);
  StageRunner runner(held, 0, /*is_last=*/true);
  const StageStats before = runner.Stats();
  MicroBatch b = MakeBatch(1, Prompt(1, 0, 8));
  std::thread batch([&] { runner.Process(b); });
  if (!held.WaitEntered(std::chrono::seconds(30))) {
    held.Let();
    batch.join();
    FAIL() << "the batch never reached the slice's Forward";
  }
  auto during = std::async(std::launch::async, [&] { return runner.Stats(); });
  const bool answered = during.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  held.Let();  // frees a Stats that waited for the batch as well
  batch.join();
  ASSERT_TRUE(answered) << "Stats waited for the batch in flight";
  EXPECT_EQ(during.get().kv_free_tokens, before.kv_free_tokens);  // as of the last batch
  ASSERT_TRUE(b.error().empty()) << b.error();
  EXPECT_LT(runner.Stats().kv_free_tokens, before.kv_free_tokens);  // the batch's KV shows now
  EXPECT_EQ(runner.Stats().sequences, 1);
}

TEST_F(StageWorkerTest, ErrorsCarryTheStageAndLeaveCachesAlone) {
  Build({0, 1, 3, 5});
  MicroBatch ok = MakeBatch(1, Prompt(1, 0, 4));
  ProcessAll(ok);
  ASSERT_TRUE(ok.error().empty()) << ok.error();

  // Token out of the vocabulary: stage 0 refuses, the others pass it on.
  MicroBatch bad = MakeBatch(2, {{1, 4, 5}, {1, 5, 999}});
  bad.add_kv_ops()->set_release(7);  // releases still apply on every stage
  ProcessAll(bad);
  EXPECT_EQ(bad.error_stage(), 0);
  EXPECT_NE(bad.error().find("stage 0"), std::string::npos) << bad.error();
  EXPECT_EQ(bad.stage_seconds_size(), 1);
  for (auto& s : slices_) EXPECT_EQ(s->Length(1), 4);

  // A gap in positions, caught by the first stage as well.
  MicroBatch gap = MakeBatch(3, {{1, 9, 5}});
  ProcessAll(gap);
  EXPECT_EQ(gap.error_stage(), 0);

  // Malformed hidden arriving at stage 2 (as if stage 1 were broken).
  MicroBatch wrong = MakeBatch(4, {{1, 4, 5}});
  wrong.set_hidden("abc");
  runners_[2]->Process(wrong);
  EXPECT_EQ(wrong.error_stage(), 2);
  EXPECT_NE(wrong.error().find("hidden"), std::string::npos) << wrong.error();
  for (auto& s : slices_) EXPECT_EQ(s->Length(1), 4);

  // The sequence continues as if nothing happened.
  const std::vector<Slot> next = {{1, 4, 50}};
  MicroBatch good = MakeBatch(5, next);
  ProcessAll(good);
  Reference(*reference_, Prompt(1, 0, 4), {});
  ExpectMatches(good, Reference(*reference_, next, {}), {});
}

// The KV log (docs/prefix_caching.md): every stage publishes, attaches,
// releases and evicts as told, in the log's order, before the slots run; a
// sequence attached to a published prefix computes what the publisher
// computed; a key evicted and published again in one batch is fine (the
// order the scheduler decided, issue 26).
TEST_F(StageWorkerTest, KvLogAppliesInOrderOnEveryStage) {
  Build({0, 2, 5});
  const std::vector<Slot> prompt = Prompt(1, 0, 20);
  MicroBatch first = MakeBatch(1, prompt);
  ProcessAll(first);
  ASSERT_TRUE(first.error().empty()) << first.error();

  // Sequence 2 starts from sequence 1's first block and computes the rest.
  std::vector<Slot> rest(prompt.begin() + 16, prompt.end());
  for (Slot& slot : rest) slot.seq = 2;
  MicroBatch second = MakeBatch(2, rest);
  internal::KvPublish* pub = second.add_kv_ops()->mutable_publish();
  pub->set_seq_id(1);
  pub->add_keys(11);
  internal::KvAttach* att = second.add_kv_ops()->mutable_attach();
  att->set_seq_id(2);
  att->add_keys(11);
  ProcessAll(second);
  ASSERT_TRUE(second.error().empty()) << second.error();
  EXPECT_EQ(second.seq_faults_size(), 0);
  const std::vector<float> a = Floats(first.hidden()), b = Floats(second.hidden());
  const size_t dim = SmallConfig().dim;
  ASSERT_EQ(b.size(), 4 * dim);
  for (size_t i = 0; i < b.size(); ++i) ASSERT_NEAR(b[i], a[16 * dim + i], 1e-5f) << i;
  for (size_t i = 0; i < slices_.size(); ++i) {
    EXPECT_EQ(slices_[i]->kv_cache().BlockTable(2)[0], slices_[i]->kv_cache().BlockTable(1)[0]);
    EXPECT_EQ(runners_[i]->Stats().kv_cached_tokens, 16);
  }

  // Released by both, the block stays cached until evicted.
  MicroBatch done = MakeBatch(3, {});
  done.add_kv_ops()->set_release(1);
  done.add_kv_ops()->set_release(2);
  ProcessAll(done);
  ASSERT_TRUE(done.error().empty()) << done.error();
  for (auto& r : runners_) EXPECT_EQ(r->Stats().kv_cached_tokens, 16);

  // Sequence 3 recomputes the same block: in one batch the scheduler
  // evicts key 11 and then publishes sequence 3's copy under it.
  MicroBatch again = MakeBatch(4, Prompt(3, 0, 16));
  ProcessAll(again);
  ASSERT_TRUE(again.error().empty()) << again.error();
  MicroBatch republish = MakeBatch(5, {});
  republish.add_kv_ops()->mutable_evict()->add_keys(11);
  pub = republish.add_kv_ops()->mutable_publish();
  pub->set_seq_id(3);
  pub->add_keys(11);
  republish.add_kv_ops()->set_release(3);
  ProcessAll(republish);
  ASSERT_TRUE(republish.error().empty()) << republish.error();
  EXPECT_EQ(republish.seq_faults_size(), 0);
  for (auto& r : runners_) {
    EXPECT_EQ(r->Stats().kv_cached_tokens, 16);
    EXPECT_EQ(r->Stats().kv_refusals, 0u);
  }
  MicroBatch drop = MakeBatch(6, {});
  drop.add_kv_ops()->mutable_evict()->add_keys(11);
  ProcessAll(drop);
  ASSERT_TRUE(drop.error().empty()) << drop.error();
  for (auto& r : runners_) {
    EXPECT_EQ(r->Stats().kv_cached_tokens, 0);
    EXPECT_EQ(r->Stats().kv_free_tokens, r->Stats().kv_capacity_tokens);
  }

  // A reset forgets every key.
  MicroBatch third = MakeBatch(7, prompt);
  ProcessAll(third);
  MicroBatch publish = MakeBatch(8, {});
  pub = publish.add_kv_ops()->mutable_publish();
  pub->set_seq_id(1);
  pub->add_keys(12);
  ProcessAll(publish);
  ASSERT_TRUE(publish.error().empty()) << publish.error();
  for (auto& r : runners_) {
    r->Reset();
    EXPECT_EQ(r->Stats().kv_cached_tokens, 0);
    EXPECT_EQ(r->Stats().kv_free_tokens, r->Stats().kv_capacity_tokens);
  }
}

// An entry a stage cannot apply fails that sequence, not the batch: the
// stage frees its KV, drops its slots from this batch and later ones until
// it is released, and names it in seq_faults; the other sequences' slots
// run and are right; an eviction the stage cannot match fails nothing.
TEST_F(StageWorkerTest, KvLogDisagreementRefusesOneSequenceNotTheBatch) {
  Build({0, 2, 5});
  MicroBatch warm = MakeBatch(1, Prompt(1, 0, 16));
  ProcessAll(warm);
  ASSERT_TRUE(warm.error().empty()) << warm.error();

  // Sequence 3 attaches a key no stage has, in a batch with sequence 2.
  const std::vector<Slot> other = Prompt(2, 0, 5);
  MicroBatch mixed = MakeBatch(2, Concat(Prompt(3, 16, 2), other));
  internal::KvAttach* bad = mixed.add_kv_ops()->mutable_attach();
  bad->set_seq_id(3);
  bad->add_keys(999);
  ProcessAll(mixed);
  ASSERT_TRUE(mixed.error().empty()) << mixed.error();
  ASSERT_EQ(mixed.seq_faults_size(), 1);
  EXPECT_EQ(mixed.seq_faults(0).seq_id(), 3u);
  EXPECT_EQ(mixed.seq_faults(0).stage(), 0);
  EXPECT_NE(mixed.seq_faults(0).error().find("attach"), std::string::npos)
      << mixed.seq_faults(0).error();
  ASSERT_EQ(mixed.seq_faults(0).keys_size(), 1);  // for the scheduler to forget
  EXPECT_EQ(mixed.seq_faults(0).keys(0), 999u);
  ASSERT_EQ(mixed.seq_ids_size(), 5);  // sequence 2's slots only
  ExpectMatches(mixed, Reference(*reference_, other, {}), {});
  for (size_t i = 0; i < slices_.size(); ++i) {
    EXPECT_EQ(slices_[i]->Length(3), 0) << "stage " << i;
    EXPECT_EQ(slices_[i]->Length(2), 5) << "stage " << i;
  }
  EXPECT_EQ(runners_[0]->Stats().kv_refusals, 1u);

  // A later batch sent before the scheduler heard: sequence 3's slots are
  // dropped again and the fault repeated; sequence 2 goes on.
  MicroBatch later = MakeBatch(3, {{3, 18, 4}, {2, 5, 9}});
  ProcessAll(later);
  ASSERT_TRUE(later.error().empty()) << later.error();
  ASSERT_EQ(later.seq_faults_size(), 1);
  EXPECT_EQ(later.seq_ids_size(), 1);
  for (auto& s : slices_) EXPECT_EQ(s->Length(2), 6);

  // A publish of blocks the sequence does not hold is refused the same way,
  // and an eviction of a key still held (or unknown) fails nothing.
  MicroBatch publish = MakeBatch(4, {});
  internal::KvPublish* pub = publish.add_kv_ops()->mutable_publish();
  pub->set_seq_id(2);
  pub->add_keys(21);  // sequence 2 holds 6 positions: no full block
  pub = publish.add_kv_ops()->mutable_publish();
  pub->set_seq_id(1);
  pub->add_keys(22);
  publish.add_kv_ops()->mutable_evict()->add_keys(22);  // held by sequence 1
  publish.add_kv_ops()->mutable_evict()->add_keys(777);
  ProcessAll(publish);
  ASSERT_TRUE(publish.error().empty()) << publish.error();
  ASSERT_EQ(publish.seq_faults_size(), 1);
  EXPECT_EQ(publish.seq_faults(0).seq_id(), 2u);
  for (auto& r : runners_) EXPECT_EQ(r->Stats().kv_cached_tokens, 0);

  // The scheduler releases them: every block comes back.
  MicroBatch done = MakeBatch(5, {});
  for (uint64_t seq : {1, 2, 3}) done.add_kv_ops()->set_release(seq);
  ProcessAll(done);
  ASSERT_TRUE(done.error().empty()) << done.error();
  EXPECT_EQ(done.seq_faults_size(), 0);
  for (auto& r : runners_) {
    EXPECT_EQ(r->Stats().kv_free_tokens, r->Stats().kv_capacity_tokens);
    EXPECT_EQ(r->Stats().sequences, 0);
  }
  // Released, sequence 3 is not refused any more (ids are never reused,
  // but the stage must not keep what it was told to forget).
  MicroBatch fresh = MakeBatch(6, Prompt(3, 0, 3));
  ProcessAll(fresh);
  ASSERT_TRUE(fresh.error().empty()) << fresh.error();
  EXPECT_EQ(fresh.seq_faults_size(), 0);
  EXPECT_EQ(fresh.seq_ids_size(), 3);
}

TEST_F(StageWorkerTest, RunnersOnInprocTransportsInThreads) {
  Build({0, 2, 3, 5});
  const std::string prefix = "inproc://stage-worker-test-" + std::to_string(getpid()) + "-";
  auto out = transport::Listen(prefix + "out");
  ASSERT_TRUE(out.ok());
  for (int i = static_cast<int>(runners_.size()) - 1; i >= 0; --i) {
    auto in = transport::Listen(prefix + std::to_string(i));
    ASSERT_TRUE(in.ok());
    auto next = transport::Connect(i + 1 < static_cast<int>(runners_.size())
                                       ? prefix + std::to_string(i + 1)
                                       : prefix + "out");
    runners_[i]->Start(std::move(*in), std::move(*next));
  }
  auto tx = transport::Connect(prefix + "0");
  ASSERT_TRUE(tx.ok());
  // Several batches in flight at once, as the pipeline clock has them.
  const std::vector<int> taps = {3, 0};
  std::vector<std::vector<Slot>> batches = {Prompt(1, 0, 5), Prompt(2, 0, 3), Prompt(3, 0, 8),
                                            {{1, 5, 9}, {2, 3, 8}, {3, 8, 7}}};
  for (size_t i = 0; i < batches.size(); ++i) {
    ASSERT_TRUE((*tx)->Send(MakeBatch(i, batches[i], taps).SerializeAsString()).ok());
  }
  for (size_t i = 0; i < batches.size(); ++i) {
    auto msg = (*out)->Receive(milliseconds(60000));
    ASSERT_TRUE(msg.ok()) << msg.status();
    MicroBatch b;
    ASSERT_TRUE(b.ParseFromString(*msg));
    EXPECT_EQ(b.batch_id(), i);
    ExpectMatches(b, Reference(*reference_, batches[i], taps), taps);
  }
  for (auto& r : runners_) r->Stop();
  for (auto& r : runners_) EXPECT_EQ(r->batches(), batches.size());
}

// GET /metrics over a raw socket (no HTTP client library in the tests).
std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string body;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) body.append(buf, n);
  close(fd);
  return body;
}

TEST_F(StageWorkerTest, StageProcessesOverTcp) {
  const std::string binary = std::string(SPECLINE_BINARY_DIR) + "/specline-stage";
  ASSERT_EQ(access(binary.c_str(), X_OK), 0) << "build the specline-stage target: " << binary;
  const std::string dir = testing::TempDir();
  Build({0, 2, 4, 5});

  // The test plays the scheduler: it feeds stage 0 and receives from the
  // last stage. The second process hosts two stages (layers 2:4 and 4:5).
  auto sink = transport::Listen("tcp://127.0.0.1:0");
  ASSERT_TRUE(sink.ok());
  auto start = [&](const std::string& name, const std::string& layers, int stage,
                   const std::string& next) {
    std::vector<std::string> argv = {binary, "--model", path_, "--layers", layers,
                                     "--stage", std::to_string(stage), "--next", next,
                                     "--threads", "1", "--kv-capacity-tokens", "512",
                                     "--port-file", dir + "/" + name + ".json"};
    return testing::ChildProcess(argv, dir + "/" + name + ".log");
  };
  testing::ChildProcess last = start("b", "2:4,4:5", 1, (*sink)->address());
  nlohmann::json b_ports = last.WaitForPortFile(dir + "/b.json", milliseconds(60000));
  testing::ChildProcess first = start("a", "0:2", 0, b_ports["data"].get<std::string>());
  nlohmann::json a_ports = first.WaitForPortFile(dir + "/a.json", milliseconds(60000));
  EXPECT_EQ(a_ports["pid"].get<int>(), first.pid());

  auto tx = transport::Connect(a_ports["data"].get<std::string>());
  ASSERT_TRUE(tx.ok());
  const std::vector<int> taps = {0, 2, 4, 5};
  std::vector<std::vector<Slot>> batches = {Concat(Prompt(1, 0, 7), Prompt(2, 0, 2)),
                                            {{1, 7, 3}, {2, 2, 4}}, {{2, 3, 5}}};
  for (size_t i = 0; i < batches.size(); ++i) {
    ASSERT_TRUE((*tx)->Send(MakeBatch(i, batches[i], taps).SerializeAsString()).ok());
    auto msg = (*sink)->Receive(milliseconds(60000));
    ASSERT_TRUE(msg.ok()) << msg.status();
    MicroBatch b;
    ASSERT_TRUE(b.ParseFromString(*msg));
    EXPECT_EQ(b.batch_id(), i);
    EXPECT_EQ(b.stage_seconds_size(), 3);
    ExpectMatches(b, Reference(*reference_, batches[i], taps), taps);
  }

  // Control plane: GetInfo on each process; Reset frees the second's KV.
  auto info_of = [](int port) {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials());
    auto stub = internal::StageWorker::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    internal::StageInfo info;
    grpc::Status st = stub->GetInfo(&ctx, {}, &info);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return info;
  };
  internal::StageInfo a = info_of(a_ports["grpc"]), b = info_of(b_ports["grpc"]);
  EXPECT_EQ(a.stage(), 0);
  EXPECT_EQ(a.layer_begin(), 0);
  EXPECT_EQ(a.layer_end(), 2);
  EXPECT_EQ(b.stage(), 1);
  EXPECT_EQ(b.layer_begin(), 2);
  EXPECT_EQ(b.layer_end(), 5);
  EXPECT_EQ(a.n_layers(), 5);
  EXPECT_EQ(a.dim(), 48);
  EXPECT_EQ(a.batches(), batches.size());
  EXPECT_EQ(a.kv_capacity_tokens(), 512);
  EXPECT_EQ(a.sequences(), 2);
  // Sequence 1 holds 8 positions, sequence 2 four: one 16-block each.
  EXPECT_EQ(a.kv_free_tokens(), 512 - 32);
  EXPECT_EQ(b.kv_free_tokens(), 512 - 32);
  EXPECT_EQ(a.data_address(), a_ports["data"].get<std::string>());
  {
    auto stub = internal::StageWorker::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(b_ports["grpc"].get<int>()),
        grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    internal::ResetResponse r;
    ASSERT_TRUE(stub->Reset(&ctx, {}, &r).ok());
  }
  EXPECT_EQ(info_of(b_ports["grpc"]).kv_free_tokens(), 512);

  // Metrics: one series per stage the process hosts.
  const std::string metrics = HttpGet(b_ports["metrics"].get<int>(), "/metrics");
  EXPECT_NE(metrics.find("specline_stage_batches_total{stage=\"1\"} 3"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("specline_stage_batches_total{stage=\"2\"} 3"), std::string::npos);
  EXPECT_NE(metrics.find("specline_stage_step_seconds_bucket{stage=\"2\",le=\"0.0001\"}"),
            std::string::npos);

  ASSERT_TRUE(first.Kill(SIGTERM));
  ASSERT_TRUE(last.Kill(SIGTERM));
  EXPECT_EQ(first.Wait(milliseconds(30000)), 0);
  EXPECT_EQ(last.Wait(milliseconds(30000)), 0);
}

TEST(StageWorkerBinary, BadFlagsExitWithUsage) {
  const std::string binary = std::string(SPECLINE_BINARY_DIR) + "/specline-stage";
  const std::string log = testing::TempDir() + "/bad.log";
  testing::ChildProcess p({binary, "--layers", "3:1", "--model", "x", "--next", "tcp://a:1"}, log);
  EXPECT_EQ(p.Wait(milliseconds(30000)), 2);
  EXPECT_NE(testing::ReadFile(log).find("--layers"), std::string::npos);
}

// A port that is taken makes the stage exit with kExitCannotListen, which
// tells `specline serve` to start again on fresh ports; gRPC must not share
// the port through SO_REUSEPORT.
TEST(StageWorkerBinary, TakenPortExitsWithTheRetryCode) {
  const std::string model = testing::TempDir() + "/taken_port_model";
  WriteRandomModel(LlamaShape(32, 64, 2, 4, 2, 64, 64), ModelFormat::kHuggingFace, model, 1,
                   DType::kF32);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int one = 1;  // as a gRPC server would hold it
  setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string taken = std::to_string(ntohs(addr.sin_port));
  const std::string binary = std::string(SPECLINE_BINARY_DIR) + "/specline-stage";
  const std::vector<std::vector<std::string>> cases = {
      {"--grpc-port", taken, "--metrics-port", "-1"},
      {"--metrics-port", taken},
      {"--data-listen", "tcp://127.0.0.1:" + taken, "--metrics-port", "-1"}};
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> argv = {binary, "--model", model, "--layers", "0:2", "--next",
                                     "tcp://127.0.0.1:1"};
    argv.insert(argv.end(), cases[i].begin(), cases[i].end());
    const std::string log = testing::TempDir() + "/taken" + std::to_string(i) + ".log";
    testing::ChildProcess p(argv, log);
    EXPECT_EQ(p.Wait(milliseconds(30000)), kExitCannotListen) << testing::ReadFile(log);
    EXPECT_NE(testing::ReadFile(log).find(taken), std::string::npos) << testing::ReadFile(log);
  }
  close(fd);
}

// --device cuda on a machine without a usable GPU (CI) stops start-up with
// a message saying so, instead of failing later or falling back silently.
TEST(StageWorkerBinary, CudaWithoutADeviceFailsClearly) {
#ifdef SPECLINE_HAVE_CUDA
  if (cuda::DeviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
#endif
  const std::string model = testing::TempDir() + "/cuda_flag_model";
  WriteRandomModel(LlamaShape(32, 64, 2, 4, 2, 64, 64), ModelFormat::kHuggingFace, model, 1,
                   DType::kF32);
  const std::string binary = std::string(SPECLINE_BINARY_DIR) + "/specline-stage";
  const std::string log = testing::TempDir() + "/cuda.log";
  testing::ChildProcess p({binary, "--model", model, "--layers", "0:2", "--next",
                           "tcp://127.0.0.1:1", "--device", "cuda", "--metrics-port", "-1"},
                          log);
  EXPECT_EQ(p.Wait(milliseconds(30000)), 1);
  const std::string text = testing::ReadFile(log);
  EXPECT_TRUE(text.find("no usable CUDA device") != std::string::npos ||
              text.find("no CUDA backend") != std::string::npos)
      << text;

  const std::string log2 = testing::TempDir() + "/tpu.log";
  testing::ChildProcess q({binary, "--model", model, "--layers", "0:2", "--next",
                           "tcp://127.0.0.1:1", "--device", "tpu", "--metrics-port", "-1"},
                          log2);
  EXPECT_EQ(q.Wait(milliseconds(30000)), 1);
  EXPECT_NE(testing::ReadFile(log2).find("--device: \"tpu\""), std::string::npos);
}

// --pipeline: one file for every pod of a StatefulSet; --stage picks the
// entry, and a flag on the command line wins over the file.
TEST(StageFlagsPipeline, EntryOfTheStageFillsUnsetFlags) {
  const std::string file = testing::TempDir() + "/pipeline.json";
  {
    std::ofstream out(file);
    out << R"({"stages": [
      {"layers": "0:3", "next": "tcp://s1:7100", "data_advertise": "tcp://s0:7100"},
      {"layers": "3:6", "next": "tcp://sched:7200", "data_advertise": "tcp://s1:7100"}]})";
  }
  auto parse = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "specline-stage");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return ParseStageFlags(static_cast<int>(argv.size()), argv.data());
  };
  auto second = parse({"--model", "m", "--pipeline", file, "--stage", "1"});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->layers, (std::vector<std::pair<int, int>>{{3, 6}}));
  EXPECT_EQ(second->next, "tcp://sched:7200");
  EXPECT_EQ(second->data_advertise, "tcp://s1:7100");

  auto overridden = parse({"--stage", "0", "--pipeline", file, "--model", "m", "--next", "tcp://x:1"});
  ASSERT_TRUE(overridden.ok()) << overridden.status();
  EXPECT_EQ(overridden->next, "tcp://x:1");
  EXPECT_EQ(overridden->layers, (std::vector<std::pair<int, int>>{{0, 3}}));

  auto missing = parse({"--model", "m", "--pipeline", file, "--stage", "2"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no entry for --stage 2"), std::string::npos) << missing.status();

  const std::string bad = testing::TempDir() + "/bad_pipeline.json";
  std::ofstream(bad) << R"({"stages": [{"layers": "5:2"}]})";
  auto bad_range = parse({"--model", "m", "--pipeline", bad, "--next", "tcp://a:1"});
  ASSERT_FALSE(bad_range.ok());
  EXPECT_NE(bad_range.status().message().find("stages[0]"), std::string::npos) << bad_range.status();

  std::ofstream(bad) << "not json";
  EXPECT_FALSE(parse({"--model", "m", "--pipeline", bad}).ok());
  EXPECT_FALSE(parse({"--model", "m", "--pipeline", testing::TempDir() + "/absent.json"}).ok());
}

// --help prints the usage on stdout and exits 0 for every service binary.
TEST(StageWorkerBinary, HelpExitsZero) {
  for (const char* name : {"specline-stage", "specline-scheduler", "specline-gateway"}) {
    const std::string log = testing::TempDir() + "/help.log";
    testing::ChildProcess p({std::string(SPECLINE_BINARY_DIR) + "/" + name, "--help"}, log);
    EXPECT_EQ(p.Wait(milliseconds(30000)), 0) << name;
    EXPECT_NE(testing::ReadFile(log).find("usage:"), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace specline
