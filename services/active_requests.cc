#include "services/active_requests.h"

namespace specline {

ActiveRequests::AddResult ActiveRequests::Add(const std::string& id,
                                              grpc::ClientContext* upstream,
                                              std::shared_ptr<Entry>* entry) {
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(entries_.size()) >= max_streams_) return AddResult::kFull;
  if (entries_.count(id)) return AddResult::kDuplicate;
  auto e = std::make_shared<Entry>();
  e->upstream = upstream;
  entries_[id] = e;
  *entry = e;
  return AddResult::kOk;
}

void ActiveRequests::Remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(id);
  if (entries_.empty()) empty_cv_.notify_all();
}

bool ActiveRequests::Abort(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  it->second->aborted = true;
  // Under the lock: the stream's handler removes its entry (taking the lock)
  // before its ClientContext goes away.
  it->second->upstream->TryCancel();
  return true;
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
