// The inbox behind every ActivationReceiver: a FIFO of whole messages that
// many producers push to and consumers pop from with a timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

namespace specline::transport {

// T: what one message is (std::string for the host transports; the nccl://
// receiver queues host and device messages).
template <typename T>
class BasicMessageQueue {
 public:
  // False after Close(): the message is dropped.
  bool Push(T message) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return false;
      items_.push_back(std::move(message));
    }
    cv_.notify_one();
    return true;
  }
  // DEADLINE_EXCEEDED after `timeout` with nothing queued; CANCELLED once
  // closed (messages still queued at Close are dropped: a closed inbox
  // belongs to a stage that is going away).
  absl::StatusOr<T> Pop(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return closed_ || !items_.empty(); })) {
      return absl::DeadlineExceededError("no message within the timeout");
    }
    if (closed_) return absl::CancelledError("receiver shut down");
    T front = std::move(items_.front());
    items_.pop_front();
    return front;
  }
  void Close() {
    std::deque<T> dropped;  // destroyed outside the lock
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      dropped.swap(items_);
    }
    cv_.notify_all();
  }
  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return items_.size();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
  bool closed_ = false;
};

using MessageQueue = BasicMessageQueue<std::string>;

}  // namespace specline::transport
