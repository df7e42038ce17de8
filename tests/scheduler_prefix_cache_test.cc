// Automatic prefix caching through real stages (in-process): with the cache
// on, every decoding policy gives exactly what it gives with the cache off,
// greedy and seeded sampled, over shared system prompts, multi-turn chats
// and partial overlaps; and the KV accounting of the scheduler and of every
// stage comes back to its baseline after eviction under pressure,
// concurrent sharers, cancels and a stage killed mid-stream.
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "scheduler/policies/pipo.h"
#include "scheduler/policies/ppsd.h"
#include "scheduler/policies/ptp.h"
#include "scheduler/policies/spd.h"
#include "tests/inproc_pipeline.h"
#include "tests/spec_heads.h"

namespace specline::testing {
namespace {

using scheduler::EngineOptions;
using scheduler::FinishReason;
using scheduler::RequestOptions;

constexpr int kBlock = 16;  // the in-process stages' KV block size

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A 40-token "system prompt" (2 full blocks and 8 tokens) every chat starts with.
std::vector<int32_t> System() { return MakePrompt(40, 900); }

RequestOptions Request(std::vector<int32_t> prompt, int max_tokens, bool sampled) {
  RequestOptions r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  if (sampled) {
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = 1234 + r.prompt.size();
  }
  return r;
}

// Leading blocks two token sequences share, at most `max`.
int CommonBlocks(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int max) {
  int n = 0;
  while (n < max && (n + 1) * kBlock <= static_cast<int>(std::min(a.size(), b.size())) &&
         std::equal(a.begin() + n * kBlock, a.begin() + (n + 1) * kBlock, b.begin() + n * kBlock)) {
    ++n;
  }
  return n;
}

StreamResult RunOne(InprocPipeline& p, const RequestOptions& r) {
  auto stream = p.engine().Submit(r);
  EXPECT_TRUE(stream.ok()) << stream.status();
  return stream.ok() ? Collect(**stream) : StreamResult{};
}

struct PolicyCase {
  std::string name;
  v1::DecodingPolicy mode;
  std::string ppsd, ptp;  // head kinds (tests/spec_heads.h)
  bool pipo = false;      // PIPO's trained head on stories260K
  bool shares = true;     // whether its requests can start from cached KV
  // Whether a seeded sampled request gives the same tokens on every run.
  // Draft-then-verify policies give the same distribution instead (their
  // drafts depend on thread timing): scheduler_spec_sampling_test checks
  // that with the prompt's prefix cached.
  bool seeded_repeats = false;
};

void PrintTo(const PolicyCase& c, std::ostream* os) { *os << c.name; }

std::string PipoHead() {
  return SourcePath(GoldenJson("training/tests/data/pipo_golden.json")["head"].get<std::string>());
}

EngineOptions CaseOptions(const PolicyCase& c, int n_stages, bool cache) {
  EngineOptions o;
  o.prefix_caching = cache;
  o.spec.policy = scheduler::DraftGate::kAlways;
  o.spec.Of<scheduler::SpdOptions>().drafter = "recycle";
  if (!c.ppsd.empty()) o.spec.Of<scheduler::PpsdOptions>().head = HeadDir(c.ppsd, n_stages);
  if (!c.ptp.empty()) o.spec.Of<scheduler::PtpOptions>().head = HeadDir(c.ptp, n_stages);
  if (c.pipo) o.spec.Of<scheduler::PipoOptions>().head = PipoHead();
  return o;
}

std::unique_ptr<InprocPipeline> CasePipeline(const PolicyCase& c, bool cache) {
  constexpr int kStages = 2;
  const std::string model = c.pipo ? SharedModelPath("stories260K/stories260K.bin") : "";
  return std::make_unique<InprocPipeline>(kStages, CaseOptions(c, kStages, cache),
                                          InprocPipeline::kStageKvTokens,
                                          std::chrono::microseconds(100), model);
}

class PrefixCacheEquality : public ::testing::TestWithParam<PolicyCase> {};

// The same requests, one after another and then all at once, on a pipeline
// with the cache and one without: the outputs must be equal token for token.
TEST_P(PrefixCacheEquality, OutputsEqualTheUncachedRunForEveryWorkload) {
  const PolicyCase c = GetParam();
  auto on = CasePipeline(c, true);
  auto off = CasePipeline(c, false);
  std::vector<RequestOptions> sent;
  bool sampled_ = false;
  std::vector<int32_t> last_on;  // what the cached pipeline answered last
  auto both = [&](RequestOptions r, int expect_cached) {
    r.mode = c.mode;
    const StreamResult a = RunOne(*on, r);
    const StreamResult b = RunOne(*off, r);
    EXPECT_TRUE(a.last.error.ok()) << a.last.error;
    if (!sampled_ || c.seeded_repeats) {
      EXPECT_EQ(a.tokens, b.tokens) << "prompt of " << r.prompt.size() << " tokens, request "
                                    << sent.size();
    }
    EXPECT_EQ(b.cached_prompt_tokens, 0);
    if (expect_cached >= 0) {
      EXPECT_EQ(a.cached_prompt_tokens, c.shares ? expect_cached : 0)
          << "request " << sent.size();
    }
    sent.push_back(r);
    last_on = a.tokens;
    return b.tokens;
  };
  const std::vector<int32_t> system = System();
  for (bool sampled : {false, true}) {
    sampled_ = sampled;
    // Two chats on one system prompt: the second reuses its 2 full blocks
    // (and the sampled round's first, the greedy round's).
    const std::vector<int32_t> user1 = MakePrompt(10, sampled ? 31 : 11);
    const std::vector<int32_t> first = Concat(system, user1);
    const std::vector<int32_t> reply = both(Request(first, 30, sampled), sampled ? 2 * kBlock : 0);
    // What the cached pipeline holds of this chat: its own reply, which a
    // sampled draft-then-verify request may draw differently from the
    // uncached pipeline's (the same distribution, other draws).
    const std::vector<int32_t> cached_chat = Concat(first, last_on);
    both(Request(Concat(system, MakePrompt(9, sampled ? 32 : 12)), 8, sampled), 2 * kBlock);
    // The next turn resends the history: the first turn's blocks are
    // cached up to its newest token, reply included (80 tokens: 4 blocks).
    const std::vector<int32_t> turn2 = Concat(Concat(first, reply), MakePrompt(6, 13));
    both(Request(turn2, 8, sampled), CommonBlocks(turn2, cached_chat, 4) * kBlock);
    // The very same prompt again: everything but the last token's block.
    both(Request(first, 6, sampled), 3 * kBlock);
    // A partial overlap inside the system prompt's second block.
    both(Request(Concat(std::vector<int32_t>(system.begin(), system.begin() + 20),
                        MakePrompt(12, 14)),
                 6, sampled),
         kBlock);
    // A prompt of exactly two blocks: its last token is always computed.
    both(Request(std::vector<int32_t>(system.begin(), system.begin() + 2 * kBlock), 6, sampled),
         kBlock);
  }
  // All at once: sharers admitted together, finishing in any order.
  std::vector<std::shared_ptr<scheduler::RequestStream>> on_streams, off_streams;
  for (const RequestOptions& r : sent) {
    on_streams.push_back(*on->engine().Submit(r));
    off_streams.push_back(*off->engine().Submit(r));
  }
  for (size_t i = 0; i < sent.size(); ++i) {
    const StreamResult a = Collect(*on_streams[i]), b = Collect(*off_streams[i]);
    EXPECT_TRUE(a.last.error.ok()) << a.last.error;
    if (sent[i].sampling.greedy() || c.seeded_repeats) {
      EXPECT_EQ(a.tokens, b.tokens) << "request " << i;
    }
  }
  const scheduler::EngineStats stats = on->engine().Stats();
  if (c.shares) {
    EXPECT_GT(stats.prefix_cache_hits, 0u);
    EXPECT_GT(stats.kv_cached_tokens, 0);
  } else {
    EXPECT_EQ(stats.prefix_cache_queries, 0u);
    EXPECT_EQ(stats.kv_cached_tokens, 0);
  }
  EXPECT_EQ(off->engine().Stats().kv_cached_tokens, 0);
  for (InprocPipeline* p : {on.get(), off.get()}) {
    EXPECT_TRUE(Eventually([&] { return p->StagesEmpty(); })) << "stages hold KV of no request";
    const scheduler::EngineStats s = p->engine().Stats();
    EXPECT_EQ(s.kv_free_tokens, s.kv_capacity_tokens);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, PrefixCacheEquality,
    ::testing::Values(
        PolicyCase{"ar", v1::DECODING_POLICY_AUTOREGRESSIVE, "", "", false, true, true},
        PolicyCase{"recycle", v1::DECODING_POLICY_RECYCLE, "", "", false, true, false},
        PolicyCase{"spd_training_free", v1::DECODING_POLICY_SPD, "", "", false, true, false},
        PolicyCase{"ptp", v1::DECODING_POLICY_PTP, "", "ptp", false, true, true},
        // Drafters fed from taps and PIPO's MTP layer read every prompt
        // position, so their requests compute the whole prompt.
        PolicyCase{"ppsd_layer_head", v1::DECODING_POLICY_PPSD, "ppsd-layer", "", false, false,
                   false},
        PolicyCase{"pipo", v1::DECODING_POLICY_PIPO, "", "", true, false, true}),
    [](const auto& info) { return info.param.name; });

EngineOptions SmallOptions(bool cache = true) {
  EngineOptions o;
  o.prefix_caching = cache;
  o.batch.prefill_chunk = 16;
  return o;
}

// 12 blocks per stage: a request of 44 prompt tokens and 20 new ones needs
// 4, and leaves 2 cached prompt blocks behind, so new prompts soon need the
// cached blocks nobody holds: the least recently used are evicted.
TEST(PrefixCacheAccounting, EvictionUnderPressureKeepsSchedulerAndStagesEqual) {
  constexpr int kKv = 12 * kBlock;
  InprocPipeline p(2, SmallOptions(), kKv);
  int64_t peak_cached = 0;
  for (int round = 0; round < 2; ++round) {
    for (uint32_t seed = 0; seed < 8; ++seed) {
      const RequestOptions r =
          Request(Concat(MakePrompt(36, 500 + seed), MakePrompt(8, round)), 20, seed % 2 == 1);
      const StreamResult got = RunOne(p, r);
      EXPECT_EQ(got.tokens, Generate1(p.model(), r).tokens) << "round " << round << " seed " << seed;
      // Round 2 replays round 1's prompts after 7 others evicted them (LRU).
      EXPECT_EQ(got.cached_prompt_tokens, 0) << "round " << round << " seed " << seed;
      ASSERT_TRUE(Eventually([&] { return p.StagesEmpty(); })) << "round " << round;
      const scheduler::EngineStats s = p.engine().Stats();
      EXPECT_EQ(s.kv_free_tokens, kKv);
      EXPECT_LE(s.kv_cached_tokens, kKv);
      peak_cached = std::max(peak_cached, s.kv_cached_tokens);
    }
  }
  EXPECT_GE(peak_cached, 8 * kBlock) << "cached blocks were evicted before they had to be";
  // The newest prompt is still cached.
  const RequestOptions again = Request(Concat(MakePrompt(36, 507), MakePrompt(8, 1)), 4, false);
  const StreamResult got = RunOne(p, again);
  EXPECT_EQ(got.cached_prompt_tokens, 2 * kBlock);
  EXPECT_EQ(got.tokens, Generate1(p.model(), again).tokens);
}

// Two conversations admitted together that share their first blocks (a
// system prompt) each compute those blocks; one publishes them first. The
// other swaps its copies for the cached ones (KvAdopt) and still publishes
// its own later blocks, so the next turn of either finds its whole prompt
// cached, and every block comes back to the pool.
TEST(PrefixCacheAccounting, SharersAdmittedTogetherBothPublishTheirOwnBlocks) {
  constexpr int kKv = 24 * kBlock;
  InprocPipeline p(2, SmallOptions(), kKv);
  const std::vector<RequestOptions> first = {
      Request(Concat(System(), MakePrompt(40, 610)), 4, false),  // 80 tokens: 5 full blocks
      Request(Concat(System(), MakePrompt(40, 620)), 4, false)};
  std::vector<std::shared_ptr<scheduler::RequestStream>> streams;
  for (const RequestOptions& r : first) {
    auto stream = p.engine().Submit(r);
    ASSERT_TRUE(stream.ok()) << stream.status();
    streams.push_back(std::move(*stream));
  }
  for (size_t i = 0; i < first.size(); ++i) {
    const StreamResult got = Collect(*streams[i]);
    EXPECT_EQ(got.tokens, Generate1(p.model(), first[i]).tokens) << "conversation " << i;
  }
  streams.clear();
  for (size_t i = 0; i < first.size(); ++i) {
    const RequestOptions next = Request(Concat(first[i].prompt, MakePrompt(16, 630 + i)), 4, false);
    const StreamResult got = RunOne(p, next);
    EXPECT_EQ(got.cached_prompt_tokens, 5 * kBlock) << "conversation " << i << "'s next turn";
    EXPECT_EQ(got.tokens, Generate1(p.model(), next).tokens) << "conversation " << i;
  }
  ASSERT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  EXPECT_EQ(p.engine().Stats().kv_free_tokens, kKv);
}

// Sharers cancelled at every stage of their life (waiting, mid-prefill,
// mid-decode) and others finishing in any order: the counts come back.
TEST(PrefixCacheAccounting, CancelsAndSharersInAnyOrderReturnEveryBlock) {
  InprocPipeline p(2, SmallOptions(), 20 * kBlock);
  const std::vector<int32_t> system = System();
  const RequestOptions warm = Request(Concat(system, MakePrompt(5, 1)), 4, false);
  EXPECT_EQ(RunOne(p, warm).tokens, Generate1(p.model(), warm).tokens);
  p.gate().Close();
  std::vector<RequestOptions> requests;
  std::vector<std::shared_ptr<scheduler::RequestStream>> streams;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(Request(Concat(system, MakePrompt(4 + i, 40 + i)), 6 + 5 * (i % 3), i % 2));
    streams.push_back(*p.engine().Submit(requests.back()));
  }
  // Some run, some wait for KV; cancel a few at each step.
  p.gate().Grant(3);
  ASSERT_TRUE(Eventually([&] { return p.gate().passed() >= 3; }));
  p.engine().Cancel(streams[1]->id());
  p.engine().Cancel(streams[7]->id());
  p.gate().Grant(4);
  ASSERT_TRUE(Eventually([&] { return p.gate().passed() >= 7; }));
  p.engine().Cancel(streams[4]->id());
  p.gate().Open();
  for (size_t i = 0; i < streams.size(); ++i) {
    const StreamResult got = Collect(*streams[i]);
    if (i == 1 || i == 4 || i == 7) {
      EXPECT_EQ(got.last.finish, FinishReason::kAbort) << i;
    } else {
      EXPECT_EQ(got.tokens, Generate1(p.model(), requests[i]).tokens) << i;
      EXPECT_EQ(got.cached_prompt_tokens, 2 * kBlock) << i;
    }
  }
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  const scheduler::EngineStats s = p.engine().Stats();
  EXPECT_EQ(s.kv_free_tokens, s.kv_capacity_tokens);
  EXPECT_GE(s.kv_cached_tokens, 2 * kBlock);
}

// A stage dies mid-stream: the pipeline is reset, the scheduler forgets
// every cached key as the stages do, and the next requests rebuild the
// cache from scratch.
TEST(PrefixCacheAccounting, StageKilledMidStreamClearsBothSides) {
  EngineOptions o = SmallOptions();
  o.retry_window = std::chrono::milliseconds(0);
  InprocPipeline p(2, o, 20 * kBlock);
  const std::vector<int32_t> system = System();
  const RequestOptions warm = Request(Concat(system, MakePrompt(5, 2)), 4, false);
  RunOne(p, warm);
  ASSERT_GT(p.engine().Stats().kv_cached_tokens, 0);
  p.gate().Close();
  auto victim = *p.engine().Submit(Request(Concat(system, MakePrompt(7, 3)), 60, false));
  std::vector<int> tokens;
  std::vector<bool> ended;
  ASSERT_GE(p.gate().StepUntil([&] { return DrainStarted({victim}, tokens, ended); }), 0);
  p.StopControl(1);
  p.StopRunner(1);
  p.gate().Open();
  EXPECT_EQ(Collect(*victim).last.finish, FinishReason::kError);
  ASSERT_TRUE(Eventually([&] { return !p.engine().up(); }));
  EXPECT_EQ(p.engine().Stats().kv_cached_tokens, 0);
  p.StartRunner(1);
  p.StartControl(1);
  ASSERT_TRUE(Eventually([&] { return p.engine().up(); }));
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); })) << "a stage kept cached blocks";
  for (int expect : {0, 2 * kBlock}) {
    const StreamResult got = RunOne(p, warm);
    EXPECT_EQ(got.tokens, Generate1(p.model(), warm).tokens);
    EXPECT_EQ(got.cached_prompt_tokens, expect);
  }
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
}

TEST(PrefixCacheAccounting, TurnedOffNothingIsCachedOrCounted) {
  InprocPipeline p(1, SmallOptions(false));
  const RequestOptions r = Request(Concat(System(), MakePrompt(5, 4)), 4, false);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(RunOne(p, r).cached_prompt_tokens, 0);
  const scheduler::EngineStats s = p.engine().Stats();
  EXPECT_EQ(s.prefix_cache_queries, 0u);
  EXPECT_EQ(s.kv_cached_tokens, 0);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  EXPECT_EQ(p.runner(0).Stats().kv_cached_tokens, 0);
}

}  // namespace
}  // namespace specline::testing
