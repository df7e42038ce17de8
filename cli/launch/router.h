// The router in front of pipeline replicas: vllm-router, the vLLM project's
// router (PyPI `vllm-router`, installed by scripts/setup.sh into
// ~/.cache/specline/router-venv). specline has no router of its own; this
// file only says how to start that one over N local gateways. Pure but for
// FindRouterBinary, so the argv is unit-tested (tests/launch_test.cc).
#pragma once

#include <string>
#include <vector>

namespace specline::launch {

struct RouterOptions {
  std::string binary;                   // path to vllm-router
  std::string policy = "cache_aware";  // vllm-router --policy
  std::string host = "127.0.0.1";      // the public HTTP listen address
  int port = 8000;
  int metrics_port = 0;  // its Prometheus endpoint, on 127.0.0.1
  // How often it checks each replica's /health: a dead replica is routed
  // around within about this long (vllm-router's default, 60 s, is for
  // clusters whose orchestrator also restarts pods).
  int health_check_interval_s = 2;
  std::string log_level;  // debug, info, warn, error; "" = its default
};

// vllm-router's --policy values.
const std::vector<std::string>& RouterPolicies();

// The argv that starts the router over gateways serving the OpenAI API on
// 127.0.0.1 at `replica_http_ports`. Throws std::invalid_argument on an
// unknown policy or no replicas.
std::vector<std::string> RouterArgv(const RouterOptions& o, const std::vector<int>& replica_http_ports);

// `explicit_path` when set; else $SPECLINE_VLLM_ROUTER; else the set-up's
// venv (~/.cache/specline/router-venv/bin/vllm-router); else `vllm-router`
// on PATH. Throws std::runtime_error, saying how to install it, when none
// is executable.
std::string FindRouterBinary(const std::string& explicit_path);

}  // namespace specline::launch
