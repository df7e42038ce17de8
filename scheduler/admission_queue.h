// The scheduler's waiting queue: the order in which admission considers the
// sequences that wait for KV.
//
//   fifo  arrival order across everyone (the behaviour before issue 26);
//   fair  round robin across tenants (the principal that sent a request),
//         each tenant's own requests in arrival order: a tenant that queued
//         50 requests gets one admission per turn like a tenant that queued
//         one, so it cannot starve the others. The round is ordered by when
//         each tenant was last admitted: the one admitted longest ago (or
//         never) goes first, so a tenant that just had its turn goes behind
//         one that arrives after it.
//
// Restarts (requests a pipeline failure caught before their first token)
// were admitted once already: under either policy they come before
// everything else, in the order they were given.
//
// Admission asks Next for a candidate, reserves its KV, then Pops it. A
// candidate whose tenant is at its KV quota is not eligible: the queue skips
// that tenant (it waits for its own requests to finish) and offers the next
// one. An eligible candidate that does not fit the free KV is not skipped:
// admission stops until it fits, so a large request is never overtaken
// forever by smaller ones (no head-of-line starvation in either direction).
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "scheduler/sequence.h"

namespace specline::scheduler {

enum class AdmissionPolicy { kFifo, kFair };
const char* AdmissionPolicyName(AdmissionPolicy p);
// "fifo" or "fair"; false for anything else.
bool ParseAdmissionPolicy(const std::string& text, AdmissionPolicy* out);

class AdmissionQueue {
 public:
  using SeqPtr = std::shared_ptr<Sequence>;
  // Whether a sequence may be admitted now (its tenant's KV quota).
  using Eligible = std::function<bool(const Sequence&)>;

  explicit AdmissionQueue(AdmissionPolicy policy = AdmissionPolicy::kFair) : policy_(policy) {}

  AdmissionPolicy policy() const { return policy_; }

  // A new request: at the back of its tenant's queue (fair) or of the one
  // queue (fifo).
  void Push(SeqPtr seq);
  // Restarts, ahead of everything waiting (and of earlier restarts), in the
  // given order.
  void PushRestarts(const std::vector<SeqPtr>& seqs);
  // Takes `seq` out wherever it is (cancelled, failed); false when absent.
  bool Remove(const Sequence& seq);

  // The sequence admission should try next: the first eligible one in the
  // policy's order, never one behind an ineligible request of its own
  // tenant. Null when nothing is eligible.
  SeqPtr Next(const Eligible& eligible) const;
  // Removes `seq` (what Next returned) as admitted: under fair, its tenant's
  // turn is over and it goes to the back of the round.
  void Pop(const Sequence& seq);

  // The queue is full and `tenant` asks for a place. Under fair, when
  // another tenant holds more places than `tenant` would with one more, the
  // newest request of the tenant holding the most is the one to give way
  // (the caller ends it), so a flood cannot take every place and lock the
  // others out. Null under fifo, or when `tenant` already holds its share.
  SeqPtr GivesWayTo(const std::string& tenant) const;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Every waiting sequence, restarts first (for the engine's sweeps:
  // expiry, pipeline failure and recovery).
  std::vector<SeqPtr> All() const;

 private:
  struct TenantQueue {
    std::string tenant;
    std::deque<SeqPtr> seqs;
  };
  // The tenant's queue in the round, or end().
  std::list<TenantQueue>::iterator FindTenant(const std::string& tenant);
  uint64_t LastAdmitted(const std::string& tenant) const;

  AdmissionPolicy policy_;
  std::deque<SeqPtr> restarts_;
  // fifo: one entry holding everyone, in arrival order. fair: one entry
  // per tenant with waiting requests, ordered by last_admitted_ (the front
  // is next; ties in the order they joined); a tenant whose queue empties
  // leaves the round and rejoins in that order when it queues again.
  std::list<TenantQueue> round_;
  // fair: the admission serial of each tenant's last admission (absent:
  // never). Bounded by the principals of the token file.
  std::map<std::string, uint64_t> last_admitted_;
  uint64_t admissions_ = 0;
  size_t size_ = 0;
};

}  // namespace specline::scheduler
