// PTP through the stage pipeline (docs/ptp.md):
//  - the stages' auxiliary rows (u_embed input + gated LoRA) give the
//    Python reference's logits for the trained stories260K adapter, and
//    token rows stay exactly the base model;
//  - the engine's PTP output equals plain decoding with the same
//    counter-based u (coupled sampling) token for token, greedy and
//    sampled, on 1 to 5 stages, next to other requests; on stories260K it
//    reproduces the reference's sequences and its number of calls;
//  - misconfigurations are refused with errors that say what to fix.
// The sampled distribution is checked statistically with the other
// policies in scheduler_spec_sampling_test.cc.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "model/drafters/ptp_adapter.h"
#include "model/runtime/ptp_coupling.h"
#include "nlohmann/json.hpp"
#include "scheduler/policies/ptp.h"
#include "tests/inproc_pipeline.h"
#include "tests/spec_heads.h"

namespace specline::testing {
namespace {

using v1::DecodingPolicy;

const nlohmann::json& Golden() { return GoldenJson("training/tests/data/ptp_golden.json"); }

std::string Stories() { return SharedModelPath("stories260K/stories260K.bin"); }
std::string TrainedAdapter() { return SourcePath(Golden()["head"].get<std::string>()); }

// Plain decoding in one process with coupled sampling: what PTP must equal.
std::vector<int32_t> CoupledPlain(const ModelSource& model, const scheduler::RequestOptions& spec) {
  LocalPipeline local(model, {0, model.config().n_layers}, SliceOptions{16, 4096}, 1);
  GenerationOptions o;
  o.sampling = spec.sampling;
  o.max_tokens = spec.max_tokens;
  o.stop_ids = spec.stop_ids;
  o.coupled = true;
  auto r = Generate(local, 1, spec.prompt, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->tokens : std::vector<int32_t>{};
}

SamplingParams Params(float t, int k, float p, float min_p, float penalty, uint64_t seed) {
  SamplingParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.min_p = min_p;
  s.repetition_penalty = penalty;
  s.seed = seed;
  return s;
}

// `always` sends every auxiliary row in every call, as the reference's
// loop does; `auto` as many as pay on the measured cost curve.
scheduler::EngineOptions PtpOptions(const std::string& adapter,
                                    scheduler::DraftGate gate = scheduler::DraftGate::kAlways) {
  scheduler::EngineOptions o;
  o.spec.Of<scheduler::PtpOptions>().head = adapter;
  o.spec.policy = gate;
  return o;
}

// One PTP call by hand on a LocalPipeline carrying the trained adapter:
// the golden's first call (prefix cached, then the verify row and eight
// auxiliary rows at their u).
TEST(PtpStages, AuxiliaryRowsGiveTheReferenceLogits) {
  if (Stories().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto model = OpenModel(Stories());
  auto adapter = std::make_shared<const PtpAdapter>(LoadDraftHead(TrainedAdapter(), model->config()));
  SliceOptions options{16, 4096};
  options.adapters = {adapter};
  for (int slices : {1, 2}) {
    LocalPipeline local(*model, EvenSplit(model->config().n_layers, slices), options, 1);
    const auto& call = Golden()["traces"]["t1"]["calls"][0];
    const auto prompt = Golden()["prompt"].get<std::vector<int32_t>>();
    const int prefix = call["prefix_len"].get<int>();
    std::vector<SlotRef> slots;
    for (int i = 0; i < prefix; ++i) slots.push_back({1, i});
    SliceOutput out;
    ASSERT_TRUE(local.Forward(slots, std::span(prompt).first(prefix), {}, &out).ok());

    slots.clear();
    std::vector<int32_t> tokens;
    std::vector<uint32_t> adapter_ids;  // 1 = the PTP adapter at auxiliary rows
    std::vector<float> aux_u;
    for (int32_t t : call["verify_tokens"].get<std::vector<int32_t>>()) {
      slots.push_back({1, static_cast<int32_t>(prefix + slots.size())});
      tokens.push_back(t);
      adapter_ids.push_back(0);
      aux_u.push_back(0.0f);
    }
    for (double u : call["aux_u"].get<std::vector<double>>()) {
      slots.push_back({1, static_cast<int32_t>(prefix + slots.size())});
      tokens.push_back(0);
      adapter_ids.push_back(1);
      aux_u.push_back(static_cast<float>(u));
    }
    ASSERT_TRUE(local.Forward(slots, tokens, {}, &out, adapter_ids, aux_u).ok());
    const std::vector<float> logits =
        local.head().Logits(out.hidden.data(), static_cast<int64_t>(slots.size()));
    const int vocab = model->config().vocab_size;
    auto expect_row = [&](const std::vector<float>& want, size_t row, const std::string& what) {
      ASSERT_EQ(want.size(), static_cast<size_t>(vocab));
      for (int v = 0; v < vocab; ++v) {
        ASSERT_NEAR(logits[row * vocab + v], want[v], 2e-4 + 2e-5 * std::fabs(want[v]))
            << what << " token " << v << " (" << slices << " slices)";
      }
    };
    expect_row(call["teacher_logits"][0].get<std::vector<float>>(), 0, "teacher row");
    const auto proposals = call["proposals"].get<std::vector<int32_t>>();
    for (size_t j = 0; j < proposals.size(); ++j) {
      expect_row(call["aux_logits"][j].get<std::vector<float>>(), 1 + j, "aux row " + std::to_string(j));
      const float* row = logits.data() + (1 + j) * vocab;
      EXPECT_EQ(std::max_element(row, row + vocab) - row, proposals[j]) << "aux row " << j;
    }
  }
}

// Token rows never see the adapter: with and without it, and with
// auxiliary rows in the same batch, their hidden states are bit-equal.
TEST(PtpStages, TokenRowsAreTheBaseModelAndUnadaptedSlicesRefuseAuxRows) {
  if (Stories().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto model = OpenModel(Stories());
  SliceOptions with{16, 4096};
  with.adapters = {
      std::make_shared<const PtpAdapter>(LoadDraftHead(TrainedAdapter(), model->config()))};
  LocalPipeline adapted(*model, {0, model->config().n_layers}, with, 1);
  LocalPipeline plain(*model, {0, model->config().n_layers}, SliceOptions{16, 4096}, 1);
  const std::vector<int32_t> prompt = {1, 441, 416, 331, 407};
  std::vector<SlotRef> slots;
  for (int i = 0; i < 5; ++i) slots.push_back({7, i});
  SliceOutput a, b;
  // Two more sequences' auxiliary rows ride along in the adapted batch.
  std::vector<SlotRef> mixed = slots;
  std::vector<int32_t> mixed_tokens = prompt;
  std::vector<uint32_t> adapter_ids(5, 0);
  std::vector<float> aux_u(5, 0.0f);
  for (int i = 0; i < 3; ++i) {
    mixed.push_back({8, i});
    mixed_tokens.push_back(0);
    adapter_ids.push_back(1);
    aux_u.push_back(0.25f * i);
  }
  ASSERT_TRUE(adapted.Forward(mixed, mixed_tokens, {}, &a, adapter_ids, aux_u).ok());
  ASSERT_TRUE(plain.Forward(slots, prompt, {}, &b).ok());
  const int dim = model->config().dim;
  EXPECT_EQ(std::vector<float>(a.hidden.begin(), a.hidden.begin() + 5 * dim), b.hidden);

  // A slice without the adapter refuses auxiliary rows and keeps its cache.
  std::vector<SlotRef> next = {{7, 5}, {7, 6}};
  const std::vector<int32_t> next_tokens = {0, 0};
  const std::vector<uint32_t> next_ids = {1, 1};
  const std::vector<float> next_u = {0.5f, 0.75f};
  absl::Status st = plain.Forward(next, next_tokens, {}, &b, next_ids, next_u);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("--adapter"), std::string::npos) << st;
  EXPECT_EQ(plain.slice(0).Length(7), 5);
  // Malformed tags are refused too: lists of the wrong length, an id the
  // slice does not host, an argument the adapter does not accept.
  const std::vector<float> short_u = {0.5f};
  EXPECT_EQ(adapted.Forward(next, next_tokens, {}, &a, next_ids, short_u).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<uint32_t> short_ids = {1};
  EXPECT_EQ(adapted.Forward(next, next_tokens, {}, &a, short_ids, next_u).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<uint32_t> unknown_ids = {1, 2};
  EXPECT_EQ(adapted.Forward(next, next_tokens, {}, &a, unknown_ids, next_u).code(),
            absl::StatusCode::kFailedPrecondition);
  const std::vector<float> big_u = {0.5f, 1.5f};
  EXPECT_EQ(adapted.Forward(next, next_tokens, {}, &a, next_ids, big_u).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(adapted.slice(0).Length(7), 5);
}

// The trained adapter through the real engine: the reference's greedy and
// sampled sequences (each equal to coupled plain decoding), with the
// reference's number of calls, on one, two and five stages.
TEST(PtpEngine, Stories260KReproducesTheReferenceSequencesAndCalls) {
  if (Stories().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  for (int stages : {1, 2, 5}) {
    InprocPipeline p(stages, PtpOptions(TrainedAdapter()), InprocPipeline::kStageKvTokens,
                     std::chrono::microseconds(0), Stories());
    for (const char* name : {"greedy", "t1", "t08_k40_p09"}) {
      const auto& g = Golden()["sequences"][name];
      scheduler::RequestOptions spec;
      spec.prompt = Golden()["prompt"].get<std::vector<int32_t>>();
      spec.max_tokens = g["steps"].get<int>();
      spec.sampling = Params(g["temperature"].get<float>(), g["top_k"].get<int>(),
                             g["top_p"].get<float>(), 0, 1, Golden()["seed"].get<uint64_t>());
      spec.mode = v1::DECODING_POLICY_PTP;
      auto stream = p.engine().Submit(spec);
      ASSERT_TRUE(stream.ok()) << stream.status();
      const StreamResult got = Collect(**stream);
      const auto want = g["tokens"].get<std::vector<int32_t>>();
      EXPECT_EQ(got.tokens, want) << name << " on " << stages << " stages";
      EXPECT_EQ(got.tokens, CoupledPlain(p.model(), spec)) << name;
      EXPECT_EQ(got.last.mode, v1::DECODING_POLICY_PTP);
      // Calls: the prompt's (which carries the first auxiliary rows) and one
      // per verification after it, as in the reference's loop.
      EXPECT_EQ(got.last.spec.drafts, g["calls"].get<int64_t>()) << name;
      EXPECT_GT(got.last.spec.accepted_tokens, 0) << name;
      const auto& st = got.last.spec;
      EXPECT_EQ(st.accepted_tokens + st.rejected_tokens + st.discarded_tokens, st.draft_tokens);
    }
    EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  }
}

// A random adapter on the random test model, many concurrent requests of
// every sampling kind (and plain ones beside them): each PTP request equals
// coupled plain decoding, each plain one equals plain decoding.
TEST(PtpEngine, EqualsCoupledPlainDecodingNextToOtherRequests) {
  using scheduler::DraftGate;
  const std::pair<int, DraftGate> runs[] = {
      {2, DraftGate::kAlways}, {4, DraftGate::kAlways}, {2, DraftGate::kAuto}};
  for (const auto& [stages, gate] : runs) {
    SCOPED_TRACE(::testing::Message() << stages << " stages, " << scheduler::DraftGateName(gate));
    InprocPipeline p(stages, PtpOptions(HeadDir("ptp", stages), gate));
    const std::vector<SamplingParams> kinds = {
        Params(0, 0, 1, 0, 1, 3),      Params(0, 0, 1, 0, 1.3f, 4),  Params(1, 0, 1, 0, 1, 5),
        Params(0.8f, 40, 0.9f, 0, 1, 6), Params(1.2f, 0, 1, 0.05f, 1.2f, 7)};
    struct Job {
      scheduler::RequestOptions spec;
      std::shared_ptr<scheduler::RequestStream> stream;
    };
    std::vector<Job> jobs;
    for (uint32_t i = 0; i < 12; ++i) {
      Job j;
      j.spec.prompt = MakePrompt(2 + i % 9, 100 + i);
      j.spec.max_tokens = 12 + i % 7;
      j.spec.sampling = kinds[i % kinds.size()];
      j.spec.sampling.seed += i;
      j.spec.mode = i % 4 == 3 ? v1::DECODING_POLICY_AUTOREGRESSIVE : v1::DECODING_POLICY_PTP;
      if (i % 5 == 2) j.spec.stop_ids = {static_cast<int32_t>(i * 7 % 96)};
      auto s = p.engine().Submit(j.spec);
      ASSERT_TRUE(s.ok()) << s.status();
      j.stream = *std::move(s);
      jobs.push_back(std::move(j));
    }
    int64_t calls = 0;
    for (Job& j : jobs) {
      const StreamResult got = Collect(*j.stream);
      if (j.spec.mode == v1::DECODING_POLICY_PTP) {
        EXPECT_EQ(got.tokens, CoupledPlain(p.model(), j.spec)) << "request " << j.stream->id();
        calls += got.last.spec.drafts;
      } else {
        EXPECT_EQ(got.tokens, Generate1(p.model(), j.spec).tokens) << "request " << j.stream->id();
      }
    }
    // Under auto the rule may send no auxiliary row to these short requests.
    if (gate == DraftGate::kAlways) {
      EXPECT_GT(calls, 0);
    }
    EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
    const auto stats = p.engine().Stats();
    EXPECT_EQ(stats.kv_free_tokens, stats.kv_capacity_tokens);
  }
}

// A request whose limit leaves no room for auxiliary rows (max_tokens 1,
// or the context's end) still decodes, and a cancelled PTP request frees
// its KV on every stage.
TEST(PtpEngine, ShortRequestsAndCancelsLeaveNothingBehind) {
  InprocPipeline p(2, PtpOptions(HeadDir("ptp", 2)));
  scheduler::RequestOptions one;
  one.prompt = MakePrompt(5, 9);
  one.max_tokens = 1;
  one.mode = v1::DECODING_POLICY_PTP;
  auto s = p.engine().Submit(one);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Collect(**s).tokens, CoupledPlain(p.model(), one));

  scheduler::RequestOptions edge;
  edge.prompt = MakePrompt(SchedulerTestConfig().max_seq_len - 3, 10);
  edge.max_tokens = 50;
  edge.mode = v1::DECODING_POLICY_PTP;
  s = p.engine().Submit(edge);
  ASSERT_TRUE(s.ok()) << s.status();
  const StreamResult got = Collect(**s);
  EXPECT_EQ(got.tokens, CoupledPlain(p.model(), edge));
  EXPECT_EQ(got.last.finish, scheduler::FinishReason::kLength);

  // Cancelled after its first token: stage 0 holds the batches (the gate),
  // so the request cannot reach its end first. A PTP call gives at most
  // 1 + n_aux tokens (4 auxiliary rows: HeadDir("ptp")) per pass through
  // stage 0.
  scheduler::RequestOptions long_one;
  long_one.prompt = MakePrompt(4, 11);
  long_one.max_tokens = 100;
  long_one.mode = v1::DECODING_POLICY_PTP;
  p.gate().Close();
  s = p.engine().Submit(long_one);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<int> tokens;
  std::vector<bool> ended;
  const int64_t passed = p.gate().StepUntil([&] { return DrainStarted({*s}, tokens, ended); });
  ASSERT_GE(passed, 0) << "no first token";
  ASSERT_FALSE(ended[0]);
  EXPECT_LT(passed * (1 + 4), long_one.max_tokens) << "so it cannot have finished";
  EXPECT_TRUE(p.engine().Cancel((*s)->id()));
  p.gate().Open();
  const StreamResult rest = Collect(**s);
  EXPECT_EQ(rest.last.finish, scheduler::FinishReason::kAbort);
  EXPECT_LT(tokens[0] + static_cast<int>(rest.tokens.size()), long_one.max_tokens);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
}

TEST(PtpEngine, MisconfigurationsAreRefusedWithWhatToFix) {
  // No adapter on the scheduler: PTP is not offered.
  {
    InprocPipeline p(2, scheduler::EngineOptions{});
    scheduler::RequestOptions r;
    r.prompt = MakePrompt(4, 1);
    r.mode = v1::DECODING_POLICY_PTP;
    auto s = p.engine().Submit(r);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.status().message().find("--ptp-head"), std::string::npos) << s.status();
    const auto modes = p.engine().modes();
    EXPECT_EQ(std::count(modes.begin(), modes.end(), v1::DECODING_POLICY_PTP), 0);
  }
  // Stages without it: PTP is refused, plain requests still run.
  {
    InprocPipeline p(2, PtpOptions(HeadDir("ptp", 2)), InprocPipeline::kStageKvTokens,
                     std::chrono::microseconds(0), "", /*heads_on_stages=*/false);
    scheduler::RequestOptions r;
    r.prompt = MakePrompt(4, 1);
    r.max_tokens = 4;
    r.mode = v1::DECODING_POLICY_PTP;
    auto s = p.engine().Submit(r);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.status().message().find("hosts no adapter"), std::string::npos) << s.status();
    EXPECT_NE(s.status().message().find("--adapter"), std::string::npos) << s.status();
    r.mode = v1::DECODING_POLICY_AUTOREGRESSIVE;
    s = p.engine().Submit(r);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(Collect(**s).tokens, Generate1(p.model(), r).tokens);
  }
  // A head of another method is not a PTP adapter.
  scheduler::EngineOptions wrong;
  wrong.spec.Of<scheduler::PtpOptions>().head = HeadDir("ppsd-norm", 2);
  std::vector<std::unique_ptr<scheduler::StageControl>> none;
  auto inbox = transport::Listen("inproc://ptp-wrong-head");
  ASSERT_TRUE(inbox.ok());
  EXPECT_THROW(scheduler::Engine(std::shared_ptr<const ModelSource>(OpenModel(SchedulerTestModel())),
                                 std::move(none), *std::move(inbox), wrong),
               std::invalid_argument);
}

}  // namespace
}  // namespace specline::testing
