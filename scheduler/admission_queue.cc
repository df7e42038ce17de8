#include "scheduler/admission_queue.h"

#include <algorithm>
#include <set>

namespace specline::scheduler {

const char* AdmissionPolicyName(AdmissionPolicy p) {
  return p == AdmissionPolicy::kFifo ? "fifo" : "fair";
}

bool ParseAdmissionPolicy(const std::string& text, AdmissionPolicy* out) {
  if (text == "fifo") {
    *out = AdmissionPolicy::kFifo;
  } else if (text == "fair") {
    *out = AdmissionPolicy::kFair;
  } else {
    return false;
  }
  return true;
}

std::list<AdmissionQueue::TenantQueue>::iterator AdmissionQueue::FindTenant(
    const std::string& tenant) {
  // fifo keeps everyone in one queue, whatever the tenant.
  if (policy_ == AdmissionPolicy::kFifo) return round_.begin();
  return std::find_if(round_.begin(), round_.end(),
                      [&](const TenantQueue& q) { return q.tenant == tenant; });
}

uint64_t AdmissionQueue::LastAdmitted(const std::string& tenant) const {
  const auto it = last_admitted_.find(tenant);
  return it == last_admitted_.end() ? 0 : it->second;
}

void AdmissionQueue::Push(SeqPtr seq) {
  auto it = FindTenant(seq->tenant);
  if (it == round_.end()) {
    // Joins behind every tenant admitted no later than it was.
    const uint64_t last = LastAdmitted(seq->tenant);
    auto at = std::find_if(round_.begin(), round_.end(),
                           [&](const TenantQueue& q) { return LastAdmitted(q.tenant) > last; });
    it = round_.insert(at, TenantQueue{seq->tenant, {}});
  }
  it->seqs.push_back(std::move(seq));
  ++size_;
}

void AdmissionQueue::PushRestarts(const std::vector<SeqPtr>& seqs) {
  restarts_.insert(restarts_.begin(), seqs.begin(), seqs.end());
  size_ += seqs.size();
}

bool AdmissionQueue::Remove(const Sequence& seq) {
  auto same = [&](const SeqPtr& s) { return s.get() == &seq; };
  if (auto r = std::find_if(restarts_.begin(), restarts_.end(), same); r != restarts_.end()) {
    restarts_.erase(r);
    --size_;
    return true;
  }
  auto it = FindTenant(seq.tenant);
  if (it == round_.end()) return false;
  auto s = std::find_if(it->seqs.begin(), it->seqs.end(), same);
  if (s == it->seqs.end()) return false;
  it->seqs.erase(s);
  --size_;
  // A tenant without waiting requests leaves the round (fifo's one queue
  // too: the next Push makes it again).
  if (it->seqs.empty()) round_.erase(it);
  return true;
}

AdmissionQueue::SeqPtr AdmissionQueue::Next(const Eligible& eligible) const {
  // Tenants whose earliest request here is not eligible: their later
  // requests must not overtake it.
  std::set<std::string> blocked;
  auto consider = [&](const SeqPtr& s) -> bool {
    if (blocked.count(s->tenant)) return false;
    if (eligible(*s)) return true;
    blocked.insert(s->tenant);
    return false;
  };
  for (const SeqPtr& s : restarts_) {
    if (consider(s)) return s;
  }
  for (const TenantQueue& q : round_) {
    if (policy_ == AdmissionPolicy::kFair) {
      // One candidate per tenant: its head.
      if (!q.seqs.empty() && consider(q.seqs.front())) return q.seqs.front();
      continue;
    }
    for (const SeqPtr& s : q.seqs) {
      if (consider(s)) return s;
    }
  }
  return nullptr;
}

void AdmissionQueue::Pop(const Sequence& seq) {
  auto same = [&](const SeqPtr& s) { return s.get() == &seq; };
  if (auto r = std::find_if(restarts_.begin(), restarts_.end(), same); r != restarts_.end()) {
    restarts_.erase(r);
    --size_;
    return;
  }
  auto it = FindTenant(seq.tenant);
  if (it == round_.end()) return;
  auto s = std::find_if(it->seqs.begin(), it->seqs.end(), same);
  if (s == it->seqs.end()) return;
  it->seqs.erase(s);
  --size_;
  if (policy_ == AdmissionPolicy::kFair) last_admitted_[seq.tenant] = ++admissions_;
  if (it->seqs.empty()) {
    round_.erase(it);
  } else if (policy_ == AdmissionPolicy::kFair) {
    round_.splice(round_.end(), round_, it);  // its turn is over: the latest admitted
  }
}

std::vector<AdmissionQueue::SeqPtr> AdmissionQueue::All() const {
  std::vector<SeqPtr> all(restarts_.begin(), restarts_.end());
  all.reserve(size_);
  for (const TenantQueue& q : round_) all.insert(all.end(), q.seqs.begin(), q.seqs.end());
  return all;
}

AdmissionQueue::SeqPtr AdmissionQueue::GivesWayTo(const std::string& tenant) const {
  if (policy_ != AdmissionPolicy::kFair) return nullptr;
  size_t mine = 0;
  const TenantQueue* longest = nullptr;
  for (const TenantQueue& q : round_) {
    if (q.tenant == tenant) mine = q.seqs.size();
    if (!longest || q.seqs.size() > longest->seqs.size()) longest = &q;
  }
  if (!longest || longest->tenant == tenant || longest->seqs.size() <= mine + 1) return nullptr;
  return longest->seqs.back();
}

}  // namespace specline::scheduler
