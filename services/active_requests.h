// The Generate streams open at the gateway: admission (a cap on open
// streams, overall and per principal), Abort by request id within the
// principal that made the request, and the count a drain waits on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/client_context.h>

namespace specline {

class ActiveRequests {
 public:
  // `max_per_principal` <= 0: no per-principal cap.
  explicit ActiveRequests(int max_streams, int max_per_principal = 0)
      : max_streams_(max_streams), max_per_principal_(max_per_principal) {}

  struct Entry {
    grpc::ClientContext* upstream = nullptr;  // the scheduler Submit call
    // Taken from the principal's token quota at admission (prompt +
    // max_tokens); what it did not generate goes back when it ends.
    int64_t quota_tokens = 0;
    std::atomic<bool> aborted{false};
  };

  enum class AddResult { kOk, kFull, kPrincipalFull, kDuplicate };
  // Registers `principal`'s stream under `id` (ids are scoped to their
  // principal); kFull beyond max_streams, kPrincipalFull beyond
  // max_per_principal.
  AddResult Add(const std::string& principal, const std::string& id,
                grpc::ClientContext* upstream, std::shared_ptr<Entry>* entry);
  void Remove(const std::string& principal, const std::string& id);
  // Marks the request aborted and cancels its scheduler call (which frees
  // its KV); false when `principal` has no such request open.
  bool Abort(const std::string& principal, const std::string& id);

  // Cancels every open stream's scheduler call (the end of a drain).
  void CancelAll();

  int size() const;
  // Waits until no stream is open or the deadline passes; true when empty.
  bool WaitEmpty(std::chrono::steady_clock::time_point deadline);

 private:
  using Key = std::pair<std::string, std::string>;  // (principal, request id)
  const int max_streams_;
  const int max_per_principal_;
  mutable std::mutex mu_;
  std::condition_variable empty_cv_;
  std::map<Key, std::shared_ptr<Entry>> entries_;
  std::map<std::string, int> per_principal_;
};

}  // namespace specline
