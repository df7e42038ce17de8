#include "scheduler/request_stream.h"

namespace specline::scheduler {

void RequestStream::Push(StreamEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = event.last();
    events_.push_back(std::move(event));
  }
  cv_.notify_all();
}

bool RequestStream::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

std::optional<StreamEvent> RequestStream::Next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  StreamEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

StreamEvent RequestStream::Drain(std::vector<int32_t>* tokens) {
  for (;;) {
    std::optional<StreamEvent> e = Next(std::chrono::milliseconds(1000));
    if (!e) continue;
    if (tokens) tokens->insert(tokens->end(), e->tokens.begin(), e->tokens.end());
    if (e->last()) return *std::move(e);
  }
}

}  // namespace specline::scheduler
