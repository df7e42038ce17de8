#include "cli/launcher.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <grpcpp/create_channel.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/cluster_secret.h"
#include "common/port_file.h"
#include "cli/launch/child_process.h"
#include "services/health_check.h"
#include "services/openai/http_server.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace specline::cli {

Launcher::Launcher(LaunchConfig config) : config_(std::move(config)) {
  if (config_.topology.model.empty()) throw std::invalid_argument("--model is required");
  if (config_.topology.stages < 1) throw std::invalid_argument("--stages must be >= 1");
  if (!config_.topology.gateway) config_.topology.gateway.emplace();
  std::string tmpl = (fs::temp_directory_path() / "specline-serve-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  run_dir_ = tmpl;
  config_.topology.run_dir = run_dir_;
  // The internal plane's secret for this run: only processes that can read
  // the run directory (0700, this user) can join the pipeline.
  cluster_secret_ = NewClusterSecret();
  const std::string secret_file = run_dir_ + "/cluster-secret";
  {
    std::ofstream out(secret_file);
    out << cluster_secret_ << "\n";
    if (!out) throw std::runtime_error("cannot write " + secret_file);
  }
  fs::permissions(secret_file, fs::perms::owner_read | fs::perms::owner_write);
  config_.topology.cluster_secret_file = secret_file;
}

Launcher::~Launcher() {
  Shutdown();
  std::error_code ec;
  fs::remove_all(run_dir_, ec);
}

launch::StopOptions Launcher::StopOptions() const {
  launch::StopOptions o;
  o.gateway_grace = std::chrono::milliseconds(config_.topology.gateway->drain_timeout_ms + 3000);
  o.grace = std::chrono::milliseconds(5000);
  o.on_stopped = [](const launch::Child& c, int status) {
    spdlog::info("serve: {} {}", c.spec.name, launch::DescribeExit(status));
  };
  return o;
}

void Launcher::Start(std::chrono::seconds timeout) {
  launch::Topology& t = config_.topology;
  const launch::Binaries binaries = launch::FindBinaries(
      config_.binary_dir.empty() ? launch::ExecutableDir() : config_.binary_dir, /*gateway=*/true);
  const int n_layers = launch::ModelLayers(t.model);
  launch::LayerBounds(t, n_layers);  // a bad --stages fails here, before anything starts
  int threads = config_.threads;
  if (threads <= 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / t.stages);
  t.stage_threads = t.scheduler_threads = threads;

  launch::StartOptions o;
  o.timeout = timeout;
  o.cluster_secret = cluster_secret_;
  o.on_retry = [](const std::string& why) {
    spdlog::warn("serve: {}; starting again on fresh ports", why);
  };
  o.stop = StopOptions();
  o.ready = [this](launch::Processes& p, Clock::time_point deadline) { WaitGatewayServing(p, deadline); };
  spdlog::info("serve: {} stage(s) over {} layers, {} threads each; run dir {}", t.stages, n_layers,
               threads, run_dir_);
  processes_.Start(t, binaries, n_layers, o);
  restart_.assign(processes_.all().size(), launch::RestartState{});
  WriteLauncherPortFile();
  const launch::ProcessSpec& gw = processes_.gateway()->spec;
  const std::string& host = t.gateway->host;
  spdlog::info("serve: ready; gateway on {}:{} (metrics :{}){}", host, gw.grpc_port, gw.metrics_port,
               gw.http_port >= 0
                   ? "; OpenAI API on http://" + host + ":" + std::to_string(gw.http_port) + "/v1"
                   : std::string());
}

void Launcher::WaitGatewayServing(launch::Processes& p, Clock::time_point deadline) {
  const launch::ProcessSpec& gw = p.gateway()->spec;
  const bool tls = !config_.topology.gateway->tls_cert.empty();
  auto channel = grpc::CreateChannel(launch::Loopback(gw.grpc_port),
                                     tls ? grpc::SslCredentials(grpc::SslCredentialsOptions{})
                                         : grpc::InsecureChannelCredentials());
  while (Clock::now() < deadline) {
    p.CheckAllStarted();
    if (tls) return;  // its port file means it listens; TLS needs the CA
    HealthState state;
    // The HTTP API's /health also says the gateway has seen the pipeline up.
    if (CheckHealth(channel, "", std::chrono::seconds(2), &state).ok() &&
        state == HealthState::kServing && (gw.http_port < 0 || openai::HealthOk(gw.http_port)))
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("the gateway did not report SERVING in time");
}

nlohmann::json Launcher::Describe() const {
  auto entry = [](const launch::Child& c) {
    nlohmann::json j = {{"grpc", c.spec.grpc_port}, {"metrics", c.spec.metrics_port}, {"pid", c.pid}};
    if (!c.spec.data.empty()) j["data"] = c.spec.data;
    if (c.spec.http_port >= 0) j["http"] = c.spec.http_port;
    return j;
  };
  nlohmann::json j;
  j["pid"] = getpid();
  j["gateway"] = entry(*processes_.gateway());
  j["scheduler"] = entry(processes_.scheduler());
  j["stages"] = nlohmann::json::array();
  for (const launch::Child& c : processes_.stages()) j["stages"].push_back(entry(c));
  j["restarts"] = restarts_;
  // Tools and tests of this user that call the internal APIs read it here.
  j["cluster_secret_file"] = config_.topology.cluster_secret_file;
  return j;
}

void Launcher::WriteLauncherPortFile() {
  if (!config_.port_file.empty()) WritePortFile(config_.port_file, Describe());
}

void Launcher::Supervise() {
  if (stopping_) return;
  const std::vector<launch::Child*> all = processes_.all();
  bool changed = false;
  for (size_t i = 0; i < all.size() && i < restart_.size(); ++i) {
    if (launch::SuperviseChild(*all[i], restart_[i])) {
      ++restarts_;
      changed = true;
    }
  }
  if (changed) WriteLauncherPortFile();
}

void Launcher::Shutdown() {
  if (stopping_) return;
  stopping_ = true;
  processes_.Stop(StopOptions());
}

std::string Launcher::gateway_address() const {
  const launch::Child* gw = processes_.gateway();
  return launch::Loopback(gw ? gw->spec.grpc_port : 0);
}

int Launcher::http_port() const {
  const launch::Child* gw = processes_.gateway();
  return gw ? gw->spec.http_port : -1;
}

}  // namespace specline::cli
