// The local launcher behind `specline serve`: N stage workers, the
// scheduler and the gateway as child processes on localhost, wired through
// ports chosen up front (so a restarted process keeps its address),
// supervised (a crashed process is restarted with the same arguments, with
// backoff) and shut down in order: gateway (drain), scheduler, stages. The
// wiring itself (argv, ports, start-up, readiness) is cli/launch/'s.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/launch/startup.h"
#include "cli/launch/supervise.h"
#include "cli/launch/topology.h"

namespace specline::cli {

struct LaunchConfig {
  // The processes and their flags. Its gateway is always started (a default
  // one when unset); stage_threads / scheduler_threads come from `threads`,
  // cluster_secret_file and run_dir from the launcher.
  launch::Topology topology;
  int threads = 0;         // per process; 0 = cores / stages
  std::string port_file;   // where the launcher writes every port and pid
  std::string binary_dir;  // where specline-stage etc. live; "" = next to specline
};

class Launcher {
 public:
  explicit Launcher(LaunchConfig config);
  ~Launcher();

  // Starts every process and waits until each has written its port file,
  // the scheduler sees all stages and the gateway reports SERVING. Throws
  // std::runtime_error (naming the process) on failure or timeout. A child
  // that could not bind its port makes it start again on fresh ports (3 tries).
  void Start(std::chrono::seconds timeout);
  // Reaps exited children and restarts due ones. Call from the thread that
  // called Start (children die with that thread, PR_SET_PDEATHSIG).
  void Supervise();
  // Gateway first (SIGTERM: it drains), then the scheduler, then the stages.
  void Shutdown();

  std::string gateway_address() const;  // 127.0.0.1:port
  int http_port() const;                // -1 when off
  int restarts() const { return restarts_; }
  // Every process's ports and pid, the restart count and the cluster
  // secret's file: the port file's content (what tools and tests read).
  nlohmann::json Describe() const;

 private:
  launch::StopOptions StopOptions() const;  // logs each exit
  void WaitGatewayServing(launch::Processes& p, std::chrono::steady_clock::time_point deadline);
  void WriteLauncherPortFile();

  LaunchConfig config_;
  std::string run_dir_;
  std::string cluster_secret_;  // the internal plane's, made per run
  launch::Processes processes_;
  std::vector<launch::RestartState> restart_;  // by processes_.all()
  int restarts_ = 0;
  bool stopping_ = false;
};

}  // namespace specline::cli
