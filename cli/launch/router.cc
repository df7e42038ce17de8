#include "cli/launch/router.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace specline::launch {
namespace {

bool Executable(const std::string& path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

// vllm-router spells its levels as Python's logging does.
std::string RouterLogLevel(const std::string& level) { return level == "warn" ? "warning" : level; }

}  // namespace

const std::vector<std::string>& RouterPolicies() {
  // kv_aware routes on the KV events the replicas' schedulers publish
  // (ReplicaSet turns them on for it; docs/routers.md "KV events").
  static const std::vector<std::string> policies = {
      "cache_aware", "kv_aware", "round_robin", "random", "power_of_two", "consistent_hash",
      "sticky_least_loaded"};
  return policies;
}

std::vector<std::string> RouterArgv(const RouterOptions& o, const std::vector<int>& replica_http_ports) {
  const auto& policies = RouterPolicies();
  if (std::find(policies.begin(), policies.end(), o.policy) == policies.end()) {
    std::string known;
    for (const std::string& p : policies) known += (known.empty() ? "" : ", ") + p;
    throw std::invalid_argument("unknown router policy '" + o.policy + "' (one of: " + known + ")");
  }
  if (replica_http_ports.empty()) throw std::invalid_argument("a router needs at least one replica");
  std::vector<std::string> argv = {o.binary, "--host", o.host, "--port", std::to_string(o.port),
                                   "--policy", o.policy};
  argv.push_back("--worker-urls");
  for (int port : replica_http_ports) argv.push_back("http://127.0.0.1:" + std::to_string(port));
  // Its metrics on a port of our choosing (its default, 29000, would collide
  // between two deployments on one machine).
  argv.insert(argv.end(), {"--prometheus-host", "127.0.0.1", "--prometheus-port",
                           std::to_string(o.metrics_port)});
  const std::string interval = std::to_string(o.health_check_interval_s);
  // The replicas are up before the router starts: its first start-up check
  // passes at once; later ones find a restarted replica within `interval`.
  argv.insert(argv.end(), {"--health-check-interval-secs", interval,
                           "--worker-startup-check-interval", "1"});
  if (!o.log_level.empty()) argv.insert(argv.end(), {"--log-level", RouterLogLevel(o.log_level)});
  return argv;
}

std::string FindRouterBinary(const std::string& explicit_path) {
  if (!explicit_path.empty()) {
    if (Executable(explicit_path)) return explicit_path;
    throw std::runtime_error("--router-binary " + explicit_path + " is not an executable file");
  }
  if (const char* env = std::getenv("SPECLINE_VLLM_ROUTER"); env && *env) {
    if (Executable(env)) return env;
    throw std::runtime_error(std::string("SPECLINE_VLLM_ROUTER=") + env + " is not an executable file");
  }
  if (const char* home = std::getenv("HOME")) {
    const std::string venv = std::string(home) + "/.cache/specline/router-venv/bin/vllm-router";
    if (Executable(venv)) return venv;
  }
  if (const char* path = std::getenv("PATH")) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');)
      if (Executable(dir + "/vllm-router")) return dir + "/vllm-router";
  }
  throw std::runtime_error(
      "vllm-router not found: run scripts/setup.sh (it installs vllm-router==0.1.17 into "
      "~/.cache/specline/router-venv), `pip install vllm-router`, or pass --router-binary");
}

}  // namespace specline::launch
