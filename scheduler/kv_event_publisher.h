// Publishes the prefix cache's KV events as vLLM does (ZmqEventPublisher):
// a ZeroMQ PUB socket sending [topic, seq, payload] frames, seq an 8-byte
// big-endian counter from 0 and payload one MessagePack batch
// (scheduler/kv_event_wire.h), and, when a replay endpoint is set, a
// ROUTER socket that resends the last `buffer_steps` batches from a given
// seq, so a subscriber that missed some (it attached late, or PUB dropped
// at its high-water mark) catches up instead of forgetting this replica.
//
// Configured with vLLM's own --kv-events-config JSON; the gateway tells
// routers where to subscribe (GET /kv_event_sources, docs/routers.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"
#include "scheduler/kv_events.h"

namespace specline::scheduler {

// vLLM's KVEventsConfig fields (same names and defaults, but off unless
// enable_kv_cache_events is true).
struct KvEventsConfig {
  bool enable_kv_cache_events = false;
  std::string publisher = "zmq";           // "zmq" | "null"
  std::string endpoint = "tcp://*:5557";   // bound; "*" port = pick one
  std::string replay_endpoint;             // "" = no replay
  int buffer_steps = 10000;                // batches kept for replay
  int hwm = 100000;                        // PUB send high-water mark
  std::string topic;
};
// INVALID_ARGUMENT naming the field on malformed JSON, an unknown field or
// publisher, or a bad value.
absl::StatusOr<KvEventsConfig> ParseKvEventsConfig(std::string_view json);

class KvEventPublisher {
 public:
  // Binds the sockets; UNAVAILABLE naming the endpoint when one cannot be.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Start(const KvEventsConfig& config);
  ~KvEventPublisher();  // sends what is pending, then closes

  // Where the prefix cache records (EngineOptions::kv_events).
  KvEventLog* log() { return &log_; }
  // The addresses as bound (a picked port filled in), for GetStats.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }
  const KvEventsConfig& config() const { return config_; }
  // Batches sent so far (the next seq).
  int64_t batches_sent() const { return next_seq_.load(); }

 private:
  struct Sockets;
  explicit KvEventPublisher(const KvEventsConfig& config);
  void Run();
  void Send(std::string payload);
  void ServeReplay();

  KvEventsConfig config_;
  std::string endpoint_, replay_endpoint_;
  KvEventLog log_;
  std::unique_ptr<Sockets> sockets_;
  std::deque<std::pair<int64_t, std::string>> replay_buffer_;
  std::atomic<int64_t> next_seq_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace specline::scheduler
