#include "cli/launch/startup.h"

#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <thread>

#include "common/cluster_secret.h"
#include "common/listen_error.h"
#include "cli/launch/ports.h"
#include "specline/internal/scheduler.grpc.pb.h"

namespace fs = std::filesystem;

namespace specline::launch {

void Spawn(Child& c, const SpawnOptions& options) {
  std::error_code ec;
  fs::remove(c.spec.port_file, ec);  // a stale file would look like readiness
  c.pid = SpawnProcess(c.spec.argv, options);
  c.started = Clock::now();
}

void CheckStarted(Child& c, const std::string& hint) {
  int status = 0;
  if (c.pid <= 0 || waitpid(c.pid, &status, WNOHANG) != c.pid) return;
  c.pid = -1;  // reaped: nothing left to stop
  const std::string what = c.spec.name + " " + DescribeExit(status) + " during start-up";
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExitCannotListen)
    throw PortTaken(what + ": a port picked for it was taken");
  throw std::runtime_error(what + hint);
}

void RetryOnPortTaken(int attempts, const std::function<void()>& start_once,
                      const std::function<void(const PortTaken&)>& before_retry) {
  // Ports are picked before the children bind them, and another process
  // can take one in between: then the whole set starts again on fresh ports.
  for (int attempt = 1;; ++attempt) {
    try {
      start_once();
      return;
    } catch (const PortTaken& e) {
      if (attempt >= attempts) throw;
      before_retry(e);
    }
  }
}

Processes::~Processes() { Stop(); }

std::vector<Child*> Processes::all() {
  std::vector<Child*> v;
  for (Child& c : stages_) v.push_back(&c);
  v.push_back(&scheduler_);
  if (has_gateway_) v.push_back(&gateway_);
  return v;
}

void Processes::Start(const Topology& topology, const Binaries& binaries, int n_layers,
                      const StartOptions& options) {
  hint_ = options.log_path.empty() ? " (see its log above)" : " (see " + options.log_path + ")";
  RetryOnPortTaken(
      options.attempts, [&] { StartOnce(topology, binaries, n_layers, options); },
      [&](const PortTaken& e) {
        if (options.on_retry) options.on_retry(e.what());
        Stop(options.stop);
      });
}

void Processes::StartOnce(const Topology& topology, const Binaries& binaries, int n_layers,
                          const StartOptions& options) {
  const Plan plan = BuildPlan(topology, binaries, n_layers, PickFreePorts(PortsNeeded(topology)));
  auto child = [](const ProcessSpec& spec) {
    Child c;
    c.spec = spec;
    return c;
  };
  stages_.clear();
  for (const ProcessSpec& s : plan.stages) stages_.push_back(child(s));
  scheduler_ = child(plan.scheduler);
  has_gateway_ = plan.gateway.has_value();
  gateway_ = has_gateway_ ? child(*plan.gateway) : Child{};

  const auto deadline = Clock::now() + options.timeout;
  const SpawnOptions spawn{.log_path = options.log_path};
  for (Child* c : all()) Spawn(*c, spawn);
  for (Child* c : all()) WaitPortFile(*c, deadline);
  WaitStagesUp(options.cluster_secret, deadline);
  if (options.ready) options.ready(*this, deadline);
}

void Processes::CheckAllStarted() {
  for (Child* c : all()) CheckStarted(*c, hint_);
}

void Processes::WaitPortFile(Child& c, Clock::time_point deadline) {
  while (!fs::exists(c.spec.port_file)) {  // written atomically: there = complete
    CheckAllStarted();
    if (Clock::now() > deadline) throw std::runtime_error(c.spec.name + " did not start in time" + hint_);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Processes::WaitStagesUp(const std::string& cluster_secret, Clock::time_point deadline) {
  auto stub = internal::Scheduler::NewStub(
      InternalChannel(Loopback(scheduler_.spec.grpc_port), cluster_secret));
  std::string last_error;
  while (Clock::now() < deadline) {
    CheckAllStarted();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    internal::SchedulerStats stats;
    grpc::Status s = stub->GetStats(&ctx, internal::StatsRequest(), &stats);
    if (s.ok()) {
      // An empty stage_up means the scheduler does not report per stage.
      bool all_up = stats.stage_up_size() == 0 || stats.stage_up_size() == static_cast<int>(stages_.size());
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

void Processes::Stop(const StopOptions& options) {
  auto stop = [&](Child& c, std::chrono::milliseconds grace) {
    if (c.pid <= 0) return;
    const int status = StopProcess(c.pid, SIGTERM, grace);
    c.pid = -1;
    if (options.on_stopped) options.on_stopped(c, status);
  };
  // The gateway drains first, so open streams finish while the pipeline is up.
  if (has_gateway_) stop(gateway_, options.gateway_grace);
  stop(scheduler_, options.grace);
  for (Child& c : stages_) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  for (Child& c : stages_) stop(c, options.grace);
}

}  // namespace specline::launch
