// `specline serve --replicas N --router POLICY`: N whole pipelines (each a
// Launcher: its stages, scheduler and gateway), and vllm-router in front of
// their OpenAI APIs, the way the field scales past one pipeline (replicas
// behind an existing router, never a home-made one). Every process is
// supervised: a crashed one restarts with its arguments, and the router's
// health checks route around a replica until it is back. One replica and
// no router is exactly `specline serve`.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/launch/router.h"
#include "cli/launch/supervise.h"
#include "cli/launcher.h"

namespace specline::cli {

struct ReplicaSetConfig {
  // Each replica's processes and flags. With a router (or several
  // replicas) every replica's gateway listens on 127.0.0.1 at picked ports
  // and the router takes the gateway's --host/--http-port.
  LaunchConfig replica;
  int replicas = 1;
  std::optional<launch::RouterOptions> router;  // binary, policy, host, port
  std::string port_file;  // every process's ports and pids, as JSON
};

// The scheduler's --kv-events-config publishing on host:port, with replay
// on host:replay_port (scheduler/kv_event_publisher.h).
std::string KvEventsConfigJson(const std::string& host, int port, int replay_port);

class ReplicaSet {
 public:
  explicit ReplicaSet(ReplicaSetConfig config);
  ~ReplicaSet();

  // Starts the replicas one after another, then the router, and waits until
  // the router answers /health. Throws std::runtime_error naming what
  // failed.
  void Start(std::chrono::seconds timeout);
  // Restarts crashed processes (every replica's and the router). Call from
  // the thread that called Start.
  void Supervise();
  // The router first (no new requests), then each replica (its gateway
  // drains its open streams).
  void Shutdown();

  bool has_router() const { return router_.has_value(); }
  int http_port() const;  // where clients go: the router's, or replica 0's gateway's
  std::string gateway_address() const;  // replica 0's gRPC gateway
  int replicas() const { return static_cast<int>(replicas_.size()); }

 private:
  void StartRouter(std::chrono::steady_clock::time_point deadline);
  void WritePortFile() const;

  ReplicaSetConfig config_;
  std::vector<std::unique_ptr<Launcher>> replicas_;
  std::optional<launch::Child> router_;
  launch::RestartState router_restart_;
  std::vector<int> restarts_seen_;  // per replica: its restart count last written
  bool stopping_ = false;
};

}  // namespace specline::cli
