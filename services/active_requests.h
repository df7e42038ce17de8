// The Generate streams open at the gateway: admission (a cap on open
// streams), Abort by request id, and the count a drain waits on.
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
  explicit ActiveRequests(int max_streams) : max_streams_(max_streams) {}

  struct Entry {
    grpc::ClientContext* upstream = nullptr;  // the scheduler Submit call
    std::atomic<bool> aborted{false};
  };

  enum class AddResult { kOk, kFull, kDuplicate };
  // Registers a stream under `id`; kFull beyond max_streams.
  AddResult Add(const std::string& id, grpc::ClientContext* upstream,
                std::shared_ptr<Entry>* entry);
  void Remove(const std::string& id);
  // Marks the request aborted and cancels its scheduler call (which frees
  // its KV); false when no such request is open.
  bool Abort(const std::string& id);

  int size() const;
  // Waits until no stream is open or the deadline passes; true when empty.
  bool WaitEmpty(std::chrono::steady_clock::time_point deadline);

 private:
  const int max_streams_;
  mutable std::mutex mu_;
  std::condition_variable empty_cv_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
};

}  // namespace specline
