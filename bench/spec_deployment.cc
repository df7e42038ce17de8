#include "bench/spec_deployment.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "bench/bench_util.h"
#include "cli/child_process.h"
#include "model/formats/model_source.h"
#include "model/runtime/local_pipeline.h"

namespace specline::bench {

namespace fs = std::filesystem;

double MachineCpuSeconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  return (user + nice + system + irq + softirq + steal) / sysconf(_SC_CLK_TCK);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

double Run::other_cores() const {
  return e2e > 0 ? std::max(0.0, machine_cpu_seconds - cpu_seconds) / e2e : 0;
}

double Run::acceptance() const {
  const double verified = double(spec.num_accepted_tokens() + spec.num_flushes());
  return verified > 0 ? spec.num_accepted_tokens() / verified : 0;
}

Deployment::Deployment(const DeploymentOptions& o) {
  std::string tmpl = (fs::temp_directory_path() / "specline-spec-bench-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  // bench binaries live in <build>/bench, the processes at <build>.
  const std::string bin_dir = cli::ExecutableDir() + "/..";
  const std::string stage_bin = bin_dir + "/specline-stage";
  const std::string sched_bin = bin_dir + "/specline-scheduler";
  for (const std::string& b : {stage_bin, sched_bin}) {
    if (access(b.c_str(), X_OK) != 0) throw std::runtime_error("cannot find " + b + "; build it");
  }
  const int n = o.stages;
  const int n_layers = OpenModel(o.model)->config().n_layers;
  if (n < 1 || n > n_layers) throw std::invalid_argument("--stages out of range");
  const std::vector<int> bounds = EvenSplit(n_layers, n);
  const std::vector<int> ports = cli::PickFreePorts(2 * n + 2);
  // Whole 16-position blocks.
  const std::string kv = std::to_string((o.kv_tokens + 15) / 16 * 16);
  auto tcp = [](int p) { return "tcp://127.0.0.1:" + std::to_string(p); };
  auto loop = [](int p) { return "127.0.0.1:" + std::to_string(p); };
  const std::string sched_data = tcp(ports[2 * n]);
  const int sched_grpc = ports[2 * n + 1];
  std::string stage_grpc;
  std::vector<std::vector<std::string>> argvs;
  for (int i = 0; i < n; ++i) {
    const std::string pf = (dir_ / ("stage-" + std::to_string(i) + ".json")).string();
    port_files_.push_back(pf);
    argvs.push_back({stage_bin, "--model", o.model,
                     "--layers", std::to_string(bounds[i]) + ":" + std::to_string(bounds[i + 1]),
                     "--stage", std::to_string(i),
                     "--data-listen", tcp(ports[2 * i]),
                     "--next", i + 1 < n ? tcp(ports[2 * (i + 1)]) : sched_data,
                     "--grpc-port", std::to_string(ports[2 * i + 1]),
                     "--metrics-port", "-1",
                     "--port-file", pf,
                     "--threads", std::to_string(o.stage_threads),
                     "--kv-capacity-tokens", kv,
                     "--log-level", "warn"});
    argvs.back().insert(argvs.back().end(), o.stage_args.begin(), o.stage_args.end());
    if (i > 0) stage_grpc += ",";
    stage_grpc += loop(ports[2 * i + 1]);
  }
  const std::string pf = (dir_ / "scheduler.json").string();
  port_files_.push_back(pf);
  std::vector<std::string> sched = {sched_bin, "--model", o.model,
                                    "--stage-grpc", stage_grpc,
                                    "--data-listen", sched_data,
                                    "--grpc-port", std::to_string(sched_grpc),
                                    "--metrics-port", "-1",
                                    "--port-file", pf,
                                    "--threads", std::to_string(o.scheduler_threads),
                                    "--kv-capacity-tokens", kv,
                                    "--allow-oracle", o.allow_oracle ? "true" : "false",
                                    "--spec-policy", o.spec_policy,
                                    "--log-level", "warn"};
  sched.insert(sched.end(), o.scheduler_args.begin(), o.scheduler_args.end());
  argvs.push_back(sched);
  // The processes' logs go to a file, not into the table.
  log_ = (dir_ / "processes.log").string();
  std::fflush(stdout);
  std::fflush(stderr);
  const int log_fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int saved_err = dup(STDERR_FILENO), saved_out = dup(STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  dup2(log_fd, STDOUT_FILENO);
  for (auto& a : argvs) pids_.push_back(cli::SpawnProcess(a));
  dup2(saved_err, STDERR_FILENO);
  dup2(saved_out, STDOUT_FILENO);
  close(saved_err);
  close(saved_out);
  close(log_fd);

  const double deadline = Now() + 120;
  for (size_t k = 0; k < port_files_.size(); ++k) {
    while (!fs::exists(port_files_[k])) {
      CheckAlive();
      if (Now() > deadline) throw std::runtime_error("a process did not start; see " + log_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  stub_ = internal::Scheduler::NewStub(
      grpc::CreateCustomChannel(loop(sched_grpc), grpc::InsecureChannelCredentials(), args));
  while (true) {
    CheckAlive();
    if (Now() > deadline) throw std::runtime_error("the scheduler did not see every stage");
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    internal::SchedulerStats st;
    if (stub_->GetStats(&ctx, internal::StatsRequest(), &st).ok() && st.stage_up_size() == n &&
        std::all_of(st.stage_up().begin(), st.stage_up().end(), [](bool b) { return b; })) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Deployment::~Deployment() {
  // Scheduler first, then the stages.
  for (auto it = pids_.rbegin(); it != pids_.rend(); ++it) {
    cli::StopProcess(*it, SIGTERM, std::chrono::seconds(10));
  }
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

Run Deployment::Submit(const BenchRequest& q) {
  internal::SubmitRequest req;
  req.set_request_id("spec-bench-" + std::to_string(++seq_));
  for (int32_t t : q.prompt) req.add_prompt(t);
  req.mutable_sampling()->set_temperature(q.temperature);
  req.mutable_sampling()->set_seed(q.seed ? q.seed : seq_);
  req.set_max_tokens(q.max_tokens);  // no stop ids: ignore EOS
  req.set_policy(q.policy);
  if (q.pipo_tau >= 0) req.set_pipo_tau(q.pipo_tau);
  if (q.oracle_alpha >= 0) {
    req.mutable_oracle()->set_alpha(q.oracle_alpha);
    if (q.reference) {
      for (int32_t t : *q.reference) req.mutable_oracle()->add_reference(t);
    }
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  Run r;
  const double cpu0 = CpuSeconds(), machine0 = MachineCpuSeconds();
  const double t0 = Now();
  auto reader = stub_->Submit(&ctx, req);
  internal::SubmitEvent ev;
  while (reader->Read(&ev)) {
    if (ev.tokens_size() > 0 && r.tokens.empty()) r.ttft = Now() - t0;
    r.tokens.insert(r.tokens.end(), ev.tokens().begin(), ev.tokens().end());
    if (ev.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      r.policy = ev.policy();
      r.spec = ev.spec_decode();
    }
  }
  r.e2e = Now() - t0;
  r.cpu_seconds = CpuSeconds() - cpu0;
  r.machine_cpu_seconds = MachineCpuSeconds() - machine0;
  const grpc::Status st = reader->Finish();
  if (!st.ok()) throw std::runtime_error("Submit failed: " + st.error_message() + " (log " + log_ + ")");
  return r;
}

double Deployment::CpuSeconds() const {
  double total = 0;
  for (pid_t p : pids_) {
    std::ifstream in("/proc/" + std::to_string(p) + "/stat");
    std::string line;
    std::getline(in, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    // Fields 3..13 precede utime (14) and stime (15).
    for (int f = 3; f <= 13; ++f) rest >> field;
    double ut = 0, st = 0;
    rest >> ut >> st;
    total += ut + st;
  }
  return total / sysconf(_SC_CLK_TCK);
}

void Deployment::CheckAlive() {
  for (pid_t p : pids_) {
    int status = 0;
    if (waitpid(p, &status, WNOHANG) == p) {
      throw std::runtime_error("a process " + cli::DescribeExit(status) + " at start-up; see " +
                               log_);
    }
  }
}

}  // namespace specline::bench
