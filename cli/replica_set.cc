#include "cli/replica_set.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

#include "cli/launch/child_process.h"
#include "cli/launch/ports.h"
#include "common/port_file.h"
#include "services/openai/http_server.h"

namespace specline::cli {

using Clock = std::chrono::steady_clock;

std::string KvEventsConfigJson(const std::string& host, int port, int replay_port) {
  const auto endpoint = [&](int p) { return "\"tcp://" + host + ":" + std::to_string(p) + "\""; };
  return "{\"enable_kv_cache_events\":true,\"endpoint\":" + endpoint(port) +
         ",\"replay_endpoint\":" + endpoint(replay_port) + "}";
}

ReplicaSet::ReplicaSet(ReplicaSetConfig config) : config_(std::move(config)) {
  if (config_.replicas < 1) throw std::invalid_argument("--replicas must be >= 1");
  LaunchConfig& r = config_.replica;
  if (!r.topology.gateway) r.topology.gateway.emplace();
  launch::GatewayOptions& g = *r.topology.gateway;
  const bool behind_router = config_.router.has_value();
  if (behind_router || config_.replicas > 1) {
    if (behind_router) {
      if (g.http_port < 0) throw std::invalid_argument("the router needs the gateways' HTTP API (--http-port)");
      config_.router->host = g.host;
      config_.router->port = g.http_port;  // 0: picked in StartRouter
    }
    // The replicas sit behind the router (or another balancer): loopback,
    // picked ports, each its own.
    g.host = "127.0.0.1";
    g.port = g.http_port = g.metrics_port = 0;
  }
  // The machine's cores shared by every process of every replica.
  if (r.threads <= 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    r.threads = std::max(1, cores / (r.topology.stages * config_.replicas));
  }
  // One replica alone keeps the launcher's own port file (and its format);
  // otherwise the set writes one file for all (WritePortFile).
  r.port_file = config_.replicas == 1 && !behind_router ? config_.port_file : "";
  // kv_aware routes on the KV events each scheduler publishes: each gets
  // its own ports, kept across its restarts, so the router's subscription
  // reconnects to a restarted scheduler (whose seq restarting at 0 tells
  // the router to forget what it held).
  const bool kv_events = behind_router && config_.router->policy == "kv_aware" &&
                         std::find(r.topology.scheduler_args.begin(), r.topology.scheduler_args.end(),
                                   "--kv-events-config") == r.topology.scheduler_args.end();
  for (int i = 0; i < config_.replicas; ++i) {
    LaunchConfig replica = r;
    if (kv_events) {
      const std::vector<int> ports = launch::PickFreePorts(2);
      replica.topology.scheduler_args.insert(
          replica.topology.scheduler_args.end(),
          {"--kv-events-config", KvEventsConfigJson("127.0.0.1", ports[0], ports[1])});
    }
    replicas_.push_back(std::make_unique<Launcher>(replica));
  }
  restarts_seen_.assign(replicas_.size(), 0);
}

ReplicaSet::~ReplicaSet() { Shutdown(); }

void ReplicaSet::Start(std::chrono::seconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (replicas_.size() > 1) spdlog::info("serve: starting replica {} of {}", i + 1, replicas_.size());
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now());
    replicas_[i]->Start(std::max(left, std::chrono::seconds(1)));
  }
  if (config_.router) StartRouter(deadline);
  WritePortFile();
}

void ReplicaSet::StartRouter(Clock::time_point deadline) {
  launch::RouterOptions& o = *config_.router;
  const std::vector<int> picked = launch::PickFreePorts(2);
  if (o.port == 0) o.port = picked[0];
  o.metrics_port = picked[1];
  std::vector<int> replica_ports;
  for (const auto& r : replicas_) replica_ports.push_back(r->http_port());
  launch::Child& c = router_.emplace();
  c.spec.name = "router (vllm-router " + o.policy + ")";
  c.spec.argv = launch::RouterArgv(o, replica_ports);
  c.spec.http_port = o.port;
  c.spec.metrics_port = o.metrics_port;
  launch::Spawn(c);
  // Its /health answers once it listens; its start-up check of the
  // replicas (all up by now) comes first.
  while (Clock::now() < deadline) {
    launch::CheckStarted(c, " (see its log above)");
    if (openai::HealthOk(o.port)) {
      spdlog::info("serve: ready; {} replicas behind vllm-router ({}): OpenAI API on http://{}:{}/v1",
                   replicas_.size(), o.policy, o.host, o.port);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error(c.spec.name + " did not answer /health in time");
}

void ReplicaSet::WritePortFile() const {
  if (config_.port_file.empty() || (replicas_.size() == 1 && !router_)) return;
  nlohmann::json j;
  j["pid"] = getpid();
  j["replicas"] = nlohmann::json::array();
  for (const auto& r : replicas_) j["replicas"].push_back(r->Describe());
  if (router_) {
    j["router"] = {{"http", router_->spec.http_port}, {"metrics", router_->spec.metrics_port},
                   {"pid", router_->pid}, {"policy", config_.router->policy}};
  }
  specline::WritePortFile(config_.port_file, j);
}

void ReplicaSet::Supervise() {
  if (stopping_) return;
  bool changed = false;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    replicas_[i]->Supervise();
    if (replicas_[i]->restarts() != restarts_seen_[i]) {
      restarts_seen_[i] = replicas_[i]->restarts();
      changed = true;
    }
  }
  if (router_ && launch::SuperviseChild(*router_, router_restart_)) changed = true;
  if (changed) WritePortFile();
}

void ReplicaSet::Shutdown() {
  if (stopping_) return;
  stopping_ = true;
  if (router_ && router_->pid > 0) {
    // vllm-router stops accepting on SIGTERM and finishes the streams it
    // forwards (it exits at once when idle): the gateways' drain time.
    const auto grace = std::chrono::milliseconds(config_.replica.topology.gateway->drain_timeout_ms + 3000);
    const int status = launch::StopProcess(router_->pid, SIGTERM, grace);
    spdlog::info("serve: {} {}", router_->spec.name, launch::DescribeExit(status));
    router_->pid = -1;
  }
  for (auto& r : replicas_) r->Shutdown();
}

int ReplicaSet::http_port() const { return router_ ? router_->spec.http_port : replicas_[0]->http_port(); }

std::string ReplicaSet::gateway_address() const { return replicas_[0]->gateway_address(); }

}  // namespace specline::cli
