#include "services/active_requests.h"

namespace specline {

ActiveRequests::AddResult ActiveRequests::Add(const std::string& principal, const std::string& id,
                                              grpc::ClientContext* upstream,
                                              std::shared_ptr<Entry>* entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(entries_.size()) >= max_streams_) return AddResult::kFull;
  int& mine = per_principal_[principal];
  if (max_per_principal_ > 0 && mine >= max_per_principal_) return AddResult::kPrincipalFull;
  const Key key{principal, id};
  if (entries_.count(key)) return AddResult::kDuplicate;
  auto e = std::make_shared<Entry>();
  e->upstream = upstream;
  entries_[key] = e;
  ++mine;
  *entry = e;
  return AddResult::kOk;
}

void ActiveRequests::Remove(const std::string& principal, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.erase(Key{principal, id}) > 0) {
    if (auto it = per_principal_.find(principal); it != per_principal_.end() && --it->second <= 0) {
      per_principal_.erase(it);
    }
  }
  if (entries_.empty()) empty_cv_.notify_all();
}

bool ActiveRequests::Abort(const std::string& principal, const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(Key{principal, id});
  if (it == entries_.end()) return false;
  it->second->aborted = true;
  // Under the lock: the stream's handler removes its entry (taking the lock)
  // before its ClientContext goes away.
  it->second->upstream->TryCancel();
  return true;
}

void ActiveRequests::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, entry] : entries_) entry->upstream->TryCancel();
}

int ActiveRequests::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(entries_.size());
}

bool ActiveRequests::WaitEmpty(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return empty_cv_.wait_until(lock, deadline, [&] { return entries_.empty(); });
}

}  // namespace specline
