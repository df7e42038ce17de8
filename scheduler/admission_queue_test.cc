// The waiting queue's order: fifo is arrival order, fair is round robin
// across tenants (FIFO within each), restarts come first under both, a
// tenant at its quota is passed over without its later requests overtaking
// its earlier one, and cancelled requests leave no trace in the round.
#include "scheduler/admission_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

namespace specline::scheduler {
namespace {

using SeqPtr = std::shared_ptr<Sequence>;

SeqPtr Seq(uint64_t id, const std::string& tenant, int64_t kv_blocks = 1) {
  RequestOptions spec;
  spec.tenant = tenant;
  spec.request_id = tenant + std::to_string(id);
  auto s = std::make_shared<Sequence>(id, spec);
  s->kv_blocks = kv_blocks;
  return s;
}

bool Anyone(const Sequence&) { return true; }

// Admits everything eligible, in the queue's order: the request ids.
std::vector<std::string> Drain(AdmissionQueue& q,
                               const AdmissionQueue::Eligible& eligible = Anyone) {
  std::vector<std::string> order;
  while (SeqPtr s = q.Next(eligible)) {
    order.push_back(s->request_id);
    q.Pop(*s);
  }
  return order;
}

TEST(AdmissionQueueTest, FifoIsArrivalOrderAcrossTenants) {
  AdmissionQueue q(AdmissionPolicy::kFifo);
  q.Push(Seq(1, "a"));
  q.Push(Seq(2, "a"));
  q.Push(Seq(3, "b"));
  q.Push(Seq(4, "a"));
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"a1", "a2", "b3", "a4"}));
  EXPECT_TRUE(q.empty());
}

TEST(AdmissionQueueTest, FairIsRoundRobinAcrossTenantsAndFifoWithinEach) {
  AdmissionQueue q(AdmissionPolicy::kFair);
  for (uint64_t i = 1; i <= 4; ++i) q.Push(Seq(i, "a"));
  q.Push(Seq(5, "b"));
  q.Push(Seq(6, "b"));
  q.Push(Seq(7, "c"));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"a1", "b5", "c7", "a2", "b6", "a3", "a4"}));
}

TEST(AdmissionQueueTest, ATenantArrivingLaterGoesAheadOfOneThatHadItsTurn) {
  AdmissionQueue q(AdmissionPolicy::kFair);
  for (uint64_t i = 1; i <= 3; ++i) q.Push(Seq(i, "a"));
  q.Push(Seq(4, "b"));
  SeqPtr first = q.Next(Anyone);
  ASSERT_EQ(first->request_id, "a1");
  q.Pop(*first);
  q.Push(Seq(5, "c"));  // never admitted: behind b (never either), ahead of a
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"b4", "c5", "a2", "a3"}));
}

// The flood of issue 26 as it reaches a server: the flooding tenant's first
// request is admitted before the other tenant's request arrives.
TEST(AdmissionQueueTest, ARequestArrivingAfterAFloodersAdmissionIsNext) {
  AdmissionQueue q(AdmissionPolicy::kFair);
  for (uint64_t i = 1; i <= 50; ++i) q.Push(Seq(i, "flood"));
  SeqPtr first = q.Next(Anyone);
  q.Pop(*first);
  q.Push(Seq(51, "interactive"));
  ASSERT_NE(q.Next(Anyone), nullptr);
  EXPECT_EQ(q.Next(Anyone)->request_id, "interactive51");
}

TEST(AdmissionQueueTest, ATenantComingBackKeepsItsPlaceInTheRound) {
  AdmissionQueue q(AdmissionPolicy::kFair);
  q.Push(Seq(1, "a"));
  q.Push(Seq(2, "b"));
  q.Push(Seq(3, "b"));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"a1", "b2", "b3"}));
  // a was admitted before b's last turn: coming back, it goes first.
  q.Push(Seq(4, "b"));
  q.Push(Seq(5, "a"));
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"a5", "b4"}));
}

// The flood of issue 26: 50 requests of one tenant queued before another
// tenant's single one.
TEST(AdmissionQueueTest, AFloodingTenantDelaysAnotherByOneAdmissionUnderFairOnly) {
  for (AdmissionPolicy policy : {AdmissionPolicy::kFair, AdmissionPolicy::kFifo}) {
    AdmissionQueue q(policy);
    for (uint64_t i = 1; i <= 50; ++i) q.Push(Seq(i, "flood"));
    q.Push(Seq(51, "interactive"));
    const std::vector<std::string> order = Drain(q);
    ASSERT_EQ(order.size(), 51u);
    const auto at = std::find(order.begin(), order.end(), "interactive51") - order.begin();
    EXPECT_EQ(at, policy == AdmissionPolicy::kFair ? 1 : 50) << AdmissionPolicyName(policy);
  }
}

TEST(AdmissionQueueTest, RestartsComeFirstUnderBothPolicies) {
  for (AdmissionPolicy policy : {AdmissionPolicy::kFair, AdmissionPolicy::kFifo}) {
    AdmissionQueue q(policy);
    q.Push(Seq(1, "a"));
    q.Push(Seq(2, "b"));
    q.PushRestarts({Seq(3, "b"), Seq(4, "a")});
    q.PushRestarts({Seq(5, "c")});  // a later failure's restarts go ahead of earlier ones
    EXPECT_EQ(q.size(), 5u);
    EXPECT_EQ(Drain(q), (std::vector<std::string>{"c5", "b3", "a4", "a1", "b2"}))
        << AdmissionPolicyName(policy);
  }
}

TEST(AdmissionQueueTest, ATenantAtItsQuotaIsPassedOverButKeepsItsOrder) {
  for (AdmissionPolicy policy : {AdmissionPolicy::kFair, AdmissionPolicy::kFifo}) {
    AdmissionQueue q(policy);
    q.Push(Seq(1, "a", /*kv_blocks=*/8));  // over a's remaining quota
    q.Push(Seq(2, "a", /*kv_blocks=*/1));  // would fit, but must not overtake a1
    q.Push(Seq(3, "b", /*kv_blocks=*/8));
    auto a_has_two_blocks_left = [](const Sequence& s) {
      return s.tenant != "a" || s.kv_blocks <= 2;
    };
    EXPECT_EQ(Drain(q, a_has_two_blocks_left), (std::vector<std::string>{"b3"}))
        << AdmissionPolicyName(policy);
    EXPECT_EQ(q.size(), 2u);
    // a's requests finished: a1, then a2.
    EXPECT_EQ(Drain(q), (std::vector<std::string>{"a1", "a2"})) << AdmissionPolicyName(policy);
  }
}

TEST(AdmissionQueueTest, RemoveTakesARequestOutAndAnEmptyTenantLeavesTheRound) {
  AdmissionQueue q(AdmissionPolicy::kFair);
  SeqPtr a1 = Seq(1, "a"), b2 = Seq(2, "b"), a3 = Seq(3, "a"), c4 = Seq(4, "c");
  for (const SeqPtr& s : {a1, b2, a3, c4}) q.Push(s);
  EXPECT_TRUE(q.Remove(*b2));
  EXPECT_FALSE(q.Remove(*b2)) << "already gone";
  EXPECT_TRUE(q.Remove(*a1));
  EXPECT_EQ(q.size(), 2u);
  std::vector<std::string> all;
  for (const SeqPtr& s : q.All()) all.push_back(s->request_id);
  EXPECT_EQ(all, (std::vector<std::string>{"a3", "c4"}));
  q.Push(Seq(5, "b"));  // b comes back at the back of the round
  EXPECT_EQ(Drain(q), (std::vector<std::string>{"a3", "c4", "b5"}));
}

// A full queue: the tenant holding the most places gives up its newest one
// to a tenant holding fewer, never to itself, and never under fifo.
TEST(AdmissionQueueTest, AFullQueueGivesWayFromTheTenantHoldingTheMost) {
  AdmissionQueue fair(AdmissionPolicy::kFair);
  for (uint64_t i = 1; i <= 5; ++i) fair.Push(Seq(i, "flood"));
  fair.Push(Seq(6, "b"));
  SeqPtr gives = fair.GivesWayTo("c");
  ASSERT_NE(gives, nullptr);
  EXPECT_EQ(gives->request_id, "flood5");
  EXPECT_EQ(fair.GivesWayTo("flood"), nullptr);
  ASSERT_NE(fair.GivesWayTo("b"), nullptr);  // b holds 1, flood 5
  // Shares that differ by one are even: nobody gives way.
  AdmissionQueue even(AdmissionPolicy::kFair);
  even.Push(Seq(1, "a"));
  even.Push(Seq(2, "a"));
  even.Push(Seq(3, "b"));
  EXPECT_EQ(even.GivesWayTo("b"), nullptr);
  AdmissionQueue fifo(AdmissionPolicy::kFifo);
  for (uint64_t i = 1; i <= 5; ++i) fifo.Push(Seq(i, "flood"));
  EXPECT_EQ(fifo.GivesWayTo("c"), nullptr);
}

TEST(AdmissionQueueTest, ParsesPolicyNames) {
  AdmissionPolicy p = AdmissionPolicy::kFair;
  EXPECT_TRUE(ParseAdmissionPolicy("fifo", &p));
  EXPECT_EQ(p, AdmissionPolicy::kFifo);
  EXPECT_TRUE(ParseAdmissionPolicy("fair", &p));
  EXPECT_EQ(p, AdmissionPolicy::kFair);
  EXPECT_FALSE(ParseAdmissionPolicy("lifo", &p));
  EXPECT_STREQ(AdmissionPolicyName(AdmissionPolicy::kFifo), "fifo");
}

}  // namespace
}  // namespace specline::scheduler
