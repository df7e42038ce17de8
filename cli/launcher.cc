#include "cli/launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <grpcpp/create_channel.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli/child_process.h"
#include "model/formats/model_source.h"
#include "model/runtime/local_pipeline.h"
#include "services/health_check.h"
#include "services/openai/http_server.h"
#include "common/cluster_secret.h"
#include "common/listen_error.h"
#include "common/port_file.h"
#include "specline/internal/scheduler.grpc.pb.h"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace specline::cli {
namespace {

std::string Loopback(int port) { return "127.0.0.1:" + std::to_string(port); }
std::string Tcp(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

std::string RequireBinary(const std::string& dir, const std::string& name) {
  const std::string path = (fs::path(dir) / name).string();
  if (access(path.c_str(), X_OK) != 0)
    throw std::runtime_error("cannot find " + name + " next to specline (looked for " + path +
                             "); build it first");
  return path;
}

}  // namespace

Launcher::Launcher(LaunchConfig config) : config_(std::move(config)) {
  if (config_.model.empty()) throw std::invalid_argument("--model is required");
  if (config_.stages < 1) throw std::invalid_argument("--stages must be >= 1");
  std::string tmpl = (fs::temp_directory_path() / "specline-serve-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  run_dir_ = tmpl;
  // The internal plane's secret for this run: only processes that can read
  // the run directory (0700, this user) can join the pipeline.
  cluster_secret_ = NewClusterSecret();
  cluster_secret_file_ = run_dir_ + "/cluster-secret";
  {
    std::ofstream out(cluster_secret_file_);
    out << cluster_secret_ << "\n";
    if (!out) throw std::runtime_error("cannot write " + cluster_secret_file_);
  }
  fs::permissions(cluster_secret_file_, fs::perms::owner_read | fs::perms::owner_write);
}

Launcher::~Launcher() {
  Shutdown();
  std::error_code ec;
  fs::remove_all(run_dir_, ec);
}

void Launcher::Spawn(Child& c) {
  std::error_code ec;
  fs::remove(c.port_file, ec);  // a stale file would look like readiness
  c.pid = SpawnProcess(c.argv);
  c.started = Clock::now();
  c.waiting_restart = false;
}

void Launcher::AddDeviceFlags(std::vector<std::string>& argv) const {
  if (!config_.device.empty()) argv.insert(argv.end(), {"--device", config_.device});
  if (!config_.dtype.empty()) argv.insert(argv.end(), {"--dtype", config_.dtype});
}

// A child that could not bind a port picked for it (kExitCannotListen).
class Launcher::PortTaken : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void Launcher::Start(std::chrono::seconds timeout) {
  // Ports are picked before the children bind them, and another process
  // can take one in between: then the whole set starts again on fresh ports.
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    try {
      StartOnce(timeout);
      return;
    } catch (const PortTaken& e) {
      if (attempt == kAttempts) throw;
      spdlog::warn("serve: {}; starting again on fresh ports", e.what());
      StopChildren();
    }
  }
}

void Launcher::StartOnce(std::chrono::seconds timeout) {
  stages_.clear();
  const std::string dir = config_.binary_dir.empty() ? ExecutableDir() : config_.binary_dir;
  const std::string stage_bin = RequireBinary(dir, "specline-stage");
  const std::string sched_bin = RequireBinary(dir, "specline-scheduler");
  const std::string gw_bin = RequireBinary(dir, "specline-gateway");

  const int n = config_.stages;
  const int n_layers = OpenModel(config_.model)->config().n_layers;
  if (n > n_layers)
    throw std::invalid_argument("--stages " + std::to_string(n) + " exceeds the model's " +
                                std::to_string(n_layers) + " layers");
  const std::vector<int> bounds = EvenSplit(n_layers, n);
  int threads = config_.threads;
  if (threads <= 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / n);

  // Every port up front: 3 per stage, 3 for the scheduler, 3 for the gateway.
  std::vector<int> ports = PickFreePorts(3 * n + 6);
  auto next = ports.begin();
  const std::string th = std::to_string(threads);
  for (int i = 0; i < n; ++i) {
    Child c;
    c.name = "stage " + std::to_string(i);
    c.data = Tcp(*next++);
    c.grpc_port = *next++;
    c.metrics_port = *next++;
    c.port_file = run_dir_ + "/stage-" + std::to_string(i) + ".json";
    stages_.push_back(c);
  }
  scheduler_.name = "scheduler";
  scheduler_.data = Tcp(*next++);
  scheduler_.grpc_port = *next++;
  scheduler_.metrics_port = *next++;
  scheduler_.port_file = run_dir_ + "/scheduler.json";
  gateway_.name = "gateway";
  gateway_.grpc_port = config_.port > 0 ? config_.port : *next;
  ++next;
  gateway_.metrics_port = config_.metrics_port > 0 ? config_.metrics_port : *next;
  ++next;
  gateway_.http_port = config_.http_port != 0 ? config_.http_port : *next;
  gateway_.port_file = run_dir_ + "/gateway.json";

  std::string stage_grpc;
  for (int i = 0; i < n; ++i) {
    Child& c = stages_[i];
    c.argv = {stage_bin, "--model", config_.model,
              "--layers", std::to_string(bounds[i]) + ":" + std::to_string(bounds[i + 1]),
              "--stage", std::to_string(i),
              "--data-listen", c.data,
              "--next", i + 1 < n ? stages_[i + 1].data : scheduler_.data,
              "--grpc-port", std::to_string(c.grpc_port),
              "--metrics-port", std::to_string(c.metrics_port),
              "--port-file", c.port_file,
              "--threads", th,
              "--cluster-secret-file", cluster_secret_file_};
    if (config_.kv_capacity_tokens > 0)
      c.argv.insert(c.argv.end(), {"--kv-capacity-tokens", std::to_string(config_.kv_capacity_tokens)});
    AddDeviceFlags(c.argv);
    if (!config_.ptp_head.empty()) c.argv.insert(c.argv.end(), {"--ptp-head", config_.ptp_head});
    if (!config_.pipo_head.empty()) c.argv.insert(c.argv.end(), {"--pipo-head", config_.pipo_head});
    stage_grpc += (i ? "," : "") + Loopback(c.grpc_port);
  }
  scheduler_.argv = {sched_bin, "--model", config_.model,
                     "--stage-grpc", stage_grpc,
                     "--data-listen", scheduler_.data,
                     "--grpc-port", std::to_string(scheduler_.grpc_port),
                     "--metrics-port", std::to_string(scheduler_.metrics_port),
                     "--port-file", scheduler_.port_file,
                     "--threads", th,
                     "--cluster-secret-file", cluster_secret_file_};
  if (config_.max_waiting > 0)
    scheduler_.argv.insert(scheduler_.argv.end(), {"--max-waiting", std::to_string(config_.max_waiting)});
  if (config_.kv_capacity_tokens > 0)
    scheduler_.argv.insert(scheduler_.argv.end(),
                           {"--kv-capacity-tokens", std::to_string(config_.kv_capacity_tokens)});
  scheduler_.argv.insert(scheduler_.argv.end(), config_.scheduler_spec_args.begin(),
                         config_.scheduler_spec_args.end());
  if (!config_.ptp_head.empty()) {
    scheduler_.argv.insert(scheduler_.argv.end(), {"--ptp-head", config_.ptp_head});
  }
  if (!config_.pipo_head.empty()) {
    scheduler_.argv.insert(scheduler_.argv.end(), {"--pipo-head", config_.pipo_head});
  }
  AddDeviceFlags(scheduler_.argv);  // the output head runs there too
  gateway_.argv = {gw_bin, "--model", config_.model,
                   "--scheduler", Loopback(scheduler_.grpc_port),
                   "--host", config_.host,
                   "--port", std::to_string(gateway_.grpc_port),
                   "--metrics-port", std::to_string(gateway_.metrics_port),
                   "--port-file", gateway_.port_file,
                   "--http-port", std::to_string(gateway_.http_port),
                   "--drain-timeout-ms", std::to_string(config_.drain_timeout_ms),
                   "--cluster-secret-file", cluster_secret_file_};
  auto add = [&](const char* flag, const std::string& v) {
    if (!v.empty()) gateway_.argv.insert(gateway_.argv.end(), {flag, v});
  };
  add("--tokenizer", config_.tokenizer);
  add("--auth-token-file", config_.auth_token_file);
  add("--served-model-name", config_.served_model_name);
  if (config_.max_streams_per_principal > 0) {
    add("--max-streams-per-principal", std::to_string(config_.max_streams_per_principal));
  }
  add("--tls-cert", config_.tls_cert);
  add("--tls-key", config_.tls_key);
  if (config_.max_concurrent_streams > 0) add("--max-concurrent-streams", std::to_string(config_.max_concurrent_streams));
  if (config_.default_max_tokens > 0) add("--default-max-tokens", std::to_string(config_.default_max_tokens));

  if (!config_.log_level.empty()) {
    for (Child* c : {&scheduler_, &gateway_}) c->argv.insert(c->argv.end(), {"--log-level", config_.log_level});
    for (Child& c : stages_) c.argv.insert(c.argv.end(), {"--log-level", config_.log_level});
  }
  const auto deadline = Clock::now() + timeout;
  spdlog::info("serve: {} stage(s) over {} layers, {} threads each; run dir {}", n, n_layers,
               threads, run_dir_);
  for (Child& c : stages_) Spawn(c);
  Spawn(scheduler_);
  Spawn(gateway_);
  for (Child& c : stages_) WaitPortFile(c, deadline);
  WaitPortFile(scheduler_, deadline);
  WaitPortFile(gateway_, deadline);
  WaitStagesUp(deadline);
  WaitGatewayServing(deadline);
  WriteLauncherPortFile();
  spdlog::info("serve: ready; gateway on {}:{} (metrics :{}){}", config_.host, gateway_.grpc_port,
               gateway_.metrics_port,
               gateway_.http_port >= 0
                   ? "; OpenAI API on http://" + config_.host + ":" + std::to_string(gateway_.http_port) + "/v1"
                   : std::string());
}

void Launcher::CheckAlive(Child& c) {
  int status = 0;
  if (waitpid(c.pid, &status, WNOHANG) != c.pid) return;
  c.pid = -1;  // reaped: nothing left to stop
  const std::string what = c.name + " " + DescribeExit(status) + " during start-up";
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExitCannotListen)
    throw PortTaken(what + ": a port picked for it was taken");
  throw std::runtime_error(what + " (see its log above)");
}

void Launcher::WaitPortFile(Child& c, Clock::time_point deadline) {
  while (!fs::exists(c.port_file)) {
    CheckAlive(c);
    if (Clock::now() > deadline) throw std::runtime_error(c.name + " did not start in time");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Launcher::WaitStagesUp(Clock::time_point deadline) {
  auto stub = internal::Scheduler::NewStub(
      InternalChannel(Loopback(scheduler_.grpc_port), cluster_secret_));
  std::string last_error;
  while (Clock::now() < deadline) {
    CheckAlive(scheduler_);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    internal::SchedulerStats stats;
    grpc::Status s = stub->GetStats(&ctx, internal::StatsRequest(), &stats);
    if (s.ok()) {
      // An empty stage_up means the scheduler does not report per stage.
      bool all_up = stats.stage_up_size() == 0 || stats.stage_up_size() == config_.stages;
      for (bool up : stats.stage_up()) all_up = all_up && up;
      if (all_up) return;
      last_error = "not every stage is up yet";
    } else {
      last_error = s.error_message();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("the scheduler did not see every stage in time: " + last_error);
}

void Launcher::WaitGatewayServing(Clock::time_point deadline) {
  auto channel = grpc::CreateChannel(Loopback(gateway_.grpc_port),
                                     config_.tls_cert.empty()
                                         ? grpc::InsecureChannelCredentials()
                                         : grpc::SslCredentials(grpc::SslCredentialsOptions{}));
  while (Clock::now() < deadline) {
    CheckAlive(gateway_);
    if (!config_.tls_cert.empty()) return;  // its port file means it listens; TLS needs the CA
    HealthState state;
    // The HTTP API's /health also says the gateway has seen the pipeline up.
    if (CheckHealth(channel, "", std::chrono::seconds(2), &state).ok() &&
        state == HealthState::kServing &&
        (gateway_.http_port < 0 || openai::HealthOk(gateway_.http_port)))
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("the gateway did not report SERVING in time");
}

void Launcher::WriteLauncherPortFile() {
  if (config_.port_file.empty()) return;
  auto entry = [](const Child& c) {
    nlohmann::json j = {{"grpc", c.grpc_port}, {"metrics", c.metrics_port}, {"pid", c.pid}};
    if (!c.data.empty()) j["data"] = c.data;
    if (c.http_port >= 0) j["http"] = c.http_port;
    return j;
  };
  nlohmann::json j;
  j["pid"] = getpid();
  j["gateway"] = entry(gateway_);
  j["scheduler"] = entry(scheduler_);
  j["stages"] = nlohmann::json::array();
  for (const Child& c : stages_) j["stages"].push_back(entry(c));
  j["restarts"] = restarts_;
  // Tools and tests of this user that call the internal APIs read it here.
  j["cluster_secret_file"] = cluster_secret_file_;
  WritePortFile(config_.port_file, j);
}

void Launcher::Supervise() {
  if (stopping_) return;
  std::vector<Child*> all;
  for (Child& c : stages_) all.push_back(&c);
  all.push_back(&scheduler_);
  all.push_back(&gateway_);
  bool changed = false;
  for (Child* c : all) {
    if (c->waiting_restart) {
      if (Clock::now() >= c->restart_at) {
        Spawn(*c);
        ++restarts_;
        changed = true;
        spdlog::warn("serve: restarted {} (pid {})", c->name, c->pid);
      }
      continue;
    }
    int status = 0;
    if (c->pid > 0 && waitpid(c->pid, &status, WNOHANG) == c->pid) {
      // A process that ran a while before crashing starts again quickly;
      // one that keeps crashing waits longer each time (up to 10 s).
      if (Clock::now() - c->started > std::chrono::seconds(30)) c->backoff = std::chrono::milliseconds(250);
      spdlog::error("serve: {} (pid {}) {}; restarting in {} ms with the same arguments", c->name,
                    c->pid, DescribeExit(status), c->backoff.count());
      c->pid = -1;
      c->waiting_restart = true;
      c->restart_at = Clock::now() + c->backoff;
      c->backoff = std::min(c->backoff * 2, std::chrono::milliseconds(10000));
    }
  }
  if (changed) WriteLauncherPortFile();
}

void Launcher::Shutdown() {
  if (stopping_) return;
  stopping_ = true;
  StopChildren();
}

void Launcher::StopChildren() {
  auto stop = [](Child& c, std::chrono::milliseconds grace) {
    if (c.pid <= 0) return;
    const int status = StopProcess(c.pid, SIGTERM, grace);
    spdlog::info("serve: {} {}", c.name, DescribeExit(status));
    c.pid = -1;
  };
  // The gateway drains first, so open streams finish while the pipeline is up.
  stop(gateway_, std::chrono::milliseconds(config_.drain_timeout_ms + 3000));
  stop(scheduler_, std::chrono::milliseconds(5000));
  for (Child& c : stages_) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  for (Child& c : stages_) stop(c, std::chrono::milliseconds(5000));
}

std::string Launcher::gateway_address() const { return Loopback(gateway_.grpc_port); }

}  // namespace specline::cli
