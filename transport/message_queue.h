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

class MessageQueue {
 public:
  // False after Close(): the message is dropped.
  bool Push(std::string message);
  // DEADLINE_EXCEEDED after `timeout` with nothing queued; CANCELLED once
  // closed (messages still queued at Close are dropped: a closed inbox
  // belongs to a stage that is going away).
  absl::StatusOr<std::string> Pop(std::chrono::milliseconds timeout);
  void Close();
  bool closed() const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> items_;
  bool closed_ = false;
};

}  // namespace specline::transport
