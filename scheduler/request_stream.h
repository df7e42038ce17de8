// The consumer's end of one request: the engine pushes events from its
// threads, the gRPC handler (or a test) pops them. Decouples the engine's
// pipeline threads from slow clients: pushing never blocks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "scheduler/sequence.h"

namespace specline::scheduler {

struct StreamEvent {
  std::vector<int32_t> tokens;
  // One per token when the request asked for logprobs.
  std::vector<v1::TokenLogprob> logprobs;
  FinishReason finish = FinishReason::kNone;  // set on the last event
  double queue_seconds = -1;                  // >= 0 on the first event
  int32_t cached_prompt_tokens = 0;           // on the first event: prompt positions reused
  absl::Status error;  // not OK on a last event that failed (UNAVAILABLE, ...)
  // On the last event: how the request was decoded and its speculation counters.
  v1::DecodingPolicy mode = v1::DECODING_POLICY_AUTOREGRESSIVE;
  SpecStats spec;
  int generated = 0;
  bool last() const { return finish != FinishReason::kNone; }
};

class RequestStream {
 public:
  explicit RequestStream(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

  // Engine side. Events after the last one are dropped: a stream ends with
  // exactly one terminal event whoever tries to end it.
  void Push(StreamEvent event);
  bool ended() const;

  // Consumer side: the next event, or nullopt after `timeout`.
  std::optional<StreamEvent> Next(std::chrono::milliseconds timeout);
  // Blocks until the last event; returns every token and the last event.
  StreamEvent Drain(std::vector<int32_t>* tokens);

 private:
  const uint64_t id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  bool ended_ = false;  // the last event was pushed
};

}  // namespace specline::scheduler
