// The local launcher behind `specline serve`: N stage workers, the
// scheduler and the gateway as child processes on localhost, wired through
// ports chosen up front (so a restarted process keeps its address),
// supervised (a crashed process is restarted with the same arguments, with
// backoff) and shut down in order: gateway (drain), scheduler, stages.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace specline::cli {

struct LaunchConfig {
  std::string model;
  std::string tokenizer;  // "" = the model's own
  int stages = 2;
  std::string host = "127.0.0.1";  // the gateway's listen address
  int port = 50051;                // gateway gRPC; 0 = pick
  int metrics_port = 0;            // gateway /metrics; 0 = pick
  int http_port = 0;               // gateway OpenAI HTTP API; 0 = pick, -1 = off
  int threads = 0;                 // per process; 0 = cores / stages
  long kv_capacity_tokens = 0;     // 0 = each process's default
  int max_waiting = 0;             // scheduler queue limit; 0 = its default
  int max_concurrent_streams = 0;  // gateway; 0 = its default
  int default_max_tokens = 0;      // gateway; 0 = its default
  int drain_timeout_ms = 10000;
  std::string auth_token_file, tls_cert, tls_key;
  std::string served_model_name;      // gateway; "" = the model file's stem
  int max_streams_per_principal = 0;  // gateway; 0 = no per-principal cap
  std::string port_file;  // where the launcher writes every port and pid
  std::string binary_dir;  // where specline-stage etc. live
  std::string log_level;   // passed to every child; "" = their default
  std::string device;      // "" / cpu, cuda (stage i on GPU i % count), cuda:N
  std::string dtype;       // GPU element type; "" = bf16
  // Speculation options for the scheduler ("--ppsd-head", DIR, ...), as is.
  std::vector<std::string> scheduler_spec_args;
  // Heads every stage and the scheduler load ("" = none): a PTP adapter, a
  // PIPO head (its backbone on the stages, its other heads on the scheduler).
  std::string ptp_head, pipo_head;
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
  int http_port() const { return gateway_.http_port; }  // -1 when off
  int restarts() const { return restarts_; }

 private:
  struct Child {
    std::string name;
    std::vector<std::string> argv;
    std::string port_file;
    std::string data;  // data-plane address, for the port file
    int grpc_port = 0, metrics_port = 0;
    int http_port = -1;  // the gateway's OpenAI HTTP API
    pid_t pid = -1;
    std::chrono::steady_clock::time_point started, restart_at;
    std::chrono::milliseconds backoff{250};
    bool waiting_restart = false;
  };
  class PortTaken;
  void StartOnce(std::chrono::seconds timeout);
  void StopChildren();  // gateway (drains), scheduler, stages
  void Spawn(Child& c);
  // --device / --dtype for a stage or the scheduler, when serve was given them.
  void AddDeviceFlags(std::vector<std::string>& argv) const;
  void WaitPortFile(Child& c, std::chrono::steady_clock::time_point deadline);
  void WaitStagesUp(std::chrono::steady_clock::time_point deadline);
  void WaitGatewayServing(std::chrono::steady_clock::time_point deadline);
  // Throws when c has exited (PortTaken when it could not bind its port).
  void CheckAlive(Child& c);
  void WriteLauncherPortFile();

  LaunchConfig config_;
  std::string run_dir_;
  std::string cluster_secret_, cluster_secret_file_;  // the internal plane's, made per run
  std::vector<Child> stages_;
  Child scheduler_, gateway_;
  int restarts_ = 0;
  bool stopping_ = false;
};

}  // namespace specline::cli
