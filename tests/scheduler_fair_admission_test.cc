// Fair admission and the per-tenant KV quota over real in-process stages
// (issue 26). Progress is counted in admissions and in batches let through
// stage 0's gate, never in time: a tenant flooding the queue delays another
// tenant's request by one admission under fair admission (all of its queue
// under fifo), a request needing more KV than a tenant may hold is refused,
// a tenant at its limit waits while another is admitted, and KV comes back
// to the full capacity afterwards.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/inproc_pipeline.h"

namespace specline::testing {
namespace {

using scheduler::AdmissionPolicy;
using scheduler::EngineOptions;
using scheduler::FinishReason;
using scheduler::RequestOptions;
using scheduler::RequestStream;

// 64 positions per stage: one "long" request (30 + 34 = 64 positions, four
// blocks of 16) at a time.
constexpr int kStageKv = 64;

EngineOptions Options(AdmissionPolicy policy) {
  EngineOptions o;
  o.batch.max_batch_tokens = 48;
  o.batch.prefill_chunk = 16;
  o.batch_timeout = 60s;
  o.admission = policy;
  return o;
}

RequestOptions Request(const std::string& tenant, int prompt_len, int max_tokens, uint32_t seed) {
  RequestOptions s;
  s.tenant = tenant;
  s.prompt = MakePrompt(prompt_len, seed);
  s.max_tokens = max_tokens;
  return s;
}

RequestOptions Long(const std::string& tenant, uint32_t seed) { return Request(tenant, 30, 34, seed); }

// `flood` long requests of one tenant, then one short request of another,
// all queued while stage 0's gate is closed; then batches are let through
// one at a time until the short request has its first token. Returns the
// admissions made by then (-1 on a hang), and leaves nothing running.
int64_t AdmissionsBeforeInteractiveFirstToken(AdmissionPolicy policy, int flood) {
  InprocPipeline p(2, Options(policy), kStageKv);
  const auto before = p.engine().Stats();
  EXPECT_EQ(before.kv_capacity_tokens, kStageKv);
  p.gate().Close();
  std::vector<std::shared_ptr<RequestStream>> floods;
  for (int i = 0; i < flood; ++i) {
    auto st = p.engine().Submit(Long("flood", 1000 + i));
    EXPECT_TRUE(st.ok()) << st.status();
    if (st.ok()) floods.push_back(*st);
  }
  auto interactive = p.engine().Submit(Request("interactive", 4, 8, 7));
  EXPECT_TRUE(interactive.ok()) << interactive.status();
  if (!interactive.ok()) return -1;
  EXPECT_EQ(p.engine().Stats().running, 1) << "one long request fills the KV";
  EXPECT_EQ(p.engine().Stats().waiting, flood) << "the interactive request waits too";

  std::optional<scheduler::StreamEvent> first;
  const int64_t batches = p.gate().StepUntil([&] {
    if (!first) first = (*interactive)->Next(std::chrono::milliseconds(0));
    return first.has_value();
  });
  const int64_t admitted = p.engine().Stats().admitted;
  std::printf("[ %s ] interactive request's first token after %lld batches, %lld admissions\n",
              scheduler::AdmissionPolicyName(policy), static_cast<long long>(batches),
              static_cast<long long>(admitted));
  EXPECT_GE(batches, 0) << "the interactive request never produced a token";

  // The flood is not needed any more: cancelling it returns its KV.
  for (const auto& s : floods) p.engine().Cancel(s->id());
  p.gate().Open();
  const StreamResult r = Collect(**interactive);
  EXPECT_EQ(r.last.finish, FinishReason::kLength);
  for (const auto& s : floods) Collect(*s);
  const auto after = p.engine().Stats();
  EXPECT_EQ(after.running, 0);
  EXPECT_EQ(after.waiting, 0);
  EXPECT_EQ(after.kv_free_tokens, after.kv_capacity_tokens)
      << "free (or cached and evictable) KV is back to the whole capacity";
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); })) << "a stage kept KV of a request";
  return batches < 0 ? -1 : admitted;
}

TEST(FairAdmissionTest, AFloodingTenantDelaysAnotherTenantByOneAdmission) {
  const int64_t admitted = AdmissionsBeforeInteractiveFirstToken(AdmissionPolicy::kFair, 50);
  ASSERT_GE(admitted, 0);
  // The first long request, then the interactive one: its turn comes at
  // the first admission after it arrived, not after 50 long requests.
  EXPECT_EQ(admitted, 2);
}

// The control: under fifo the same request waits for the whole flood (a
// shorter one, to keep the run short).
TEST(FairAdmissionTest, UnderFifoTheInteractiveRequestWaitsForTheWholeFlood) {
  const int64_t admitted = AdmissionsBeforeInteractiveFirstToken(AdmissionPolicy::kFifo, 6);
  ASSERT_GE(admitted, 0);
  EXPECT_EQ(admitted, 7);
}

// A flood that fills the whole waiting queue does not lock another tenant
// out: the flood's newest request gives its place (RESOURCE_EXHAUSTED,
// naming --max-waiting), the other tenant's request is queued and served.
// The flood itself is refused once the queue is full.
TEST(FairAdmissionTest, AFloodFillingTheQueueGivesWayToAnotherTenant) {
  EngineOptions o = Options(AdmissionPolicy::kFair);
  o.max_waiting = 8;
  InprocPipeline p(2, o, kStageKv);
  p.gate().Close();
  std::vector<std::shared_ptr<RequestStream>> floods;
  for (int i = 0; i < 9; ++i) {  // one runs, eight wait
    auto st = p.engine().Submit(Long("flood", 2000 + i));
    ASSERT_TRUE(st.ok()) << st.status();
    floods.push_back(*st);
  }
  auto refused = p.engine().Submit(Long("flood", 3000));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  const RequestOptions mine = Request("interactive", 4, 8, 7);
  auto interactive = p.engine().Submit(mine);
  ASSERT_TRUE(interactive.ok()) << interactive.status();
  EXPECT_EQ(p.engine().Stats().waiting, 8);
  // The flood's newest request ended, with the limit named.
  const StreamResult gave_way = Collect(*floods.back());
  EXPECT_EQ(gave_way.last.finish, FinishReason::kError);
  EXPECT_EQ(gave_way.last.error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(gave_way.last.error.message().find("--max-waiting"), std::string::npos)
      << gave_way.last.error;
  floods.pop_back();
  for (const auto& s : floods) p.engine().Cancel(s->id());
  p.gate().Open();
  const StreamResult got = Collect(**interactive);
  EXPECT_TRUE(got.last.error.ok()) << got.last.error;
  EXPECT_EQ(got.tokens, Generate1(p.model(), mine).tokens);
  for (const auto& s : floods) Collect(*s);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  const auto after = p.engine().Stats();
  EXPECT_EQ(after.kv_free_tokens, after.kv_capacity_tokens);
  EXPECT_EQ(after.waiting, 0);
}

TEST(FairAdmissionTest, KvQuotaRefusesATooLargeRequestAndHoldsATenantAtItsLimit) {
  EngineOptions o = Options(AdmissionPolicy::kFair);
  o.max_kv_blocks_per_tenant = 4;  // one long request per tenant
  InprocPipeline p(2, o);          // plenty of KV: only the quota holds anyone back
  const auto before = p.engine().Stats();

  // 30 + 50 positions: five blocks, more than a tenant may ever hold.
  auto huge = p.engine().Submit(Request("a", 30, 50, 1));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_NE(huge.status().message().find("--max-kv-blocks-per-tenant 4"), std::string::npos)
      << huge.status();
  EXPECT_NE(huge.status().message().find("tenant 'a'"), std::string::npos) << huge.status();
  EXPECT_EQ(p.engine().Stats().admitted, before.admitted);

  p.gate().Close();  // nothing finishes: admission alone decides what runs
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<RequestOptions> specs = {Long("a", 2), Long("a", 3), Long("b", 4)};
  for (const RequestOptions& s : specs) {
    auto st = p.engine().Submit(s);
    ASSERT_TRUE(st.ok()) << st.status();
    streams.push_back(*st);
  }
  auto held = p.engine().Stats();
  EXPECT_EQ(held.running, 2) << "a's first and b's request";
  EXPECT_EQ(held.waiting, 1) << "a's second waits for a's first to finish";
  EXPECT_EQ(held.admitted, before.admitted + 2);
  EXPECT_EQ(held.kv_free_tokens, before.kv_free_tokens - 2 * 64) << "the KV was there for it";

  p.gate().Open();
  for (size_t i = 0; i < streams.size(); ++i) {
    const StreamResult r = Collect(*streams[i]);
    EXPECT_EQ(r.tokens, Generate1(p.model(), specs[i]).tokens) << "request " << i;
    EXPECT_TRUE(r.last.error.ok()) << r.last.error;
  }
  const auto after = p.engine().Stats();
  EXPECT_EQ(after.admitted, before.admitted + 3);
  EXPECT_EQ(after.running, 0);
  EXPECT_EQ(after.waiting, 0);
  EXPECT_EQ(after.kv_free_tokens, before.kv_free_tokens);
  EXPECT_EQ(after.kv_free_tokens, after.kv_capacity_tokens);
  // a's quota came back with its requests: another long one runs at once.
  p.gate().Close();
  auto again = p.engine().Submit(Long("a", 5));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(p.engine().Stats().running, 1);
  p.gate().Open();
  EXPECT_EQ(Collect(**again).last.finish, FinishReason::kLength);
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
}

}  // namespace
}  // namespace specline::testing
