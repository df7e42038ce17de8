#include "transport/message_queue.h"

namespace specline::transport {

bool MessageQueue::Push(std::string message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    items_.push_back(std::move(message));
  }
  cv_.notify_one();
  return true;
}

absl::StatusOr<std::string> MessageQueue::Pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return closed_ || !items_.empty(); })) {
    return absl::DeadlineExceededError("no message within the timeout");
  }
  if (closed_) return absl::CancelledError("receiver shut down");
  std::string front = std::move(items_.front());
  items_.pop_front();
  return front;
}

void MessageQueue::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    items_.clear();
  }
  cv_.notify_all();
}

bool MessageQueue::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

size_t MessageQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return items_.size();
}

}  // namespace specline::transport
