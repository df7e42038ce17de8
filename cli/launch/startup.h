// Starting a Plan (cli/launch/topology.h): spawn every process, wait until each
// has written its port file and the scheduler sees every stage, and start
// the whole set again on fresh ports when a child could not bind a port
// picked for it (exit kExitCannotListen, 75). Then stop it in order:
// gateway (it drains), scheduler, stages.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/launch/child_process.h"
#include "cli/launch/topology.h"

namespace specline::launch {

using Clock = std::chrono::steady_clock;

// A child that could not bind a port picked for it (kExitCannotListen):
// starting again on fresh ports can succeed.
class PortTaken : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One process of a started plan.
struct Child {
  ProcessSpec spec;
  pid_t pid = -1;  // -1: not running (never started, reaped or stopped)
  Clock::time_point started;
};

// Spawns c.spec.argv, after removing c's port file (a stale one would look
// like readiness).
void Spawn(Child& c, const SpawnOptions& options = {});

// Throws when c has exited (and reaps it, pid = -1): PortTaken when it
// could not bind its port, std::runtime_error otherwise; both messages name
// the process and end with `hint`.
void CheckStarted(Child& c, const std::string& hint);

// Runs `start_once` up to `attempts` times while it throws PortTaken,
// calling `before_retry` (with the error) in between; rethrows the last.
void RetryOnPortTaken(int attempts, const std::function<void()>& start_once,
                      const std::function<void(const PortTaken&)>& before_retry);

class Processes;

struct StopOptions {
  std::chrono::milliseconds gateway_grace{13000};  // SIGTERM to SIGKILL: its drain
  std::chrono::milliseconds grace{5000};           // the scheduler's and each stage's
  // After each process is gone, with its wait status (-1: already reaped).
  std::function<void(const Child&, int status)> on_stopped;
};

struct StartOptions {
  std::chrono::seconds timeout{300};  // per attempt
  int attempts = 3;                   // starts on fresh ports, at most
  std::string log_path;               // the children's stdout/stderr; "" = ours
  std::string cluster_secret;         // what the scheduler wants on internal RPCs
  // Before starting again on fresh ports (the reason); e.g. to log it.
  std::function<void(const std::string&)> on_retry;
  StopOptions stop;  // how the processes are stopped before that
  // Runs once the scheduler sees every stage, before Start returns: more
  // readiness checks (the gateway's health). May throw, PortTaken included.
  std::function<void(Processes&, Clock::time_point deadline)> ready;
};


// The processes of one plan.
class Processes {
 public:
  Processes() = default;
  Processes(const Processes&) = delete;
  Processes& operator=(const Processes&) = delete;
  // Stops what is still running (StopOptions defaults).
  ~Processes();

  // Picks ports, builds the plan (BuildPlan), spawns stages, scheduler and
  // gateway, and waits for them (StartOptions). Throws std::runtime_error
  // naming the process on failure or timeout, std::invalid_argument on a
  // bad topology; what was started is left running for Stop.
  void Start(const Topology& topology, const Binaries& binaries, int n_layers,
             const StartOptions& options);
  // Gateway first (SIGTERM: it drains), then the scheduler, then the stages.
  void Stop(const StopOptions& options = {});

  std::vector<Child>& stages() { return stages_; }
  const std::vector<Child>& stages() const { return stages_; }
  Child& scheduler() { return scheduler_; }
  const Child& scheduler() const { return scheduler_; }
  Child* gateway() { return has_gateway_ ? &gateway_ : nullptr; }
  const Child* gateway() const { return has_gateway_ ? &gateway_ : nullptr; }
  // Stages, scheduler, gateway.
  std::vector<Child*> all();
  // Throws (CheckStarted) when any child has exited.
  void CheckAllStarted();
  // How a start-up failure message ends: where the children's logs are.
  const std::string& hint() const { return hint_; }

 private:
  void StartOnce(const Topology& topology, const Binaries& binaries, int n_layers,
                 const StartOptions& options);
  void WaitPortFile(Child& c, Clock::time_point deadline);
  void WaitStagesUp(const std::string& cluster_secret, Clock::time_point deadline);

  std::vector<Child> stages_;
  Child scheduler_, gateway_;
  bool has_gateway_ = false;
  std::string hint_;
};

}  // namespace specline::launch
