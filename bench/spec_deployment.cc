#include "bench/spec_deployment.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <grpcpp/grpcpp.h>

#include "bench/bench_util.h"
#include "cli/launch/child_process.h"
#include "cli/launch/topology.h"

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
  launch::Topology t;
  t.model = o.model;
  t.stages = o.stages;
  t.stage_threads = o.stage_threads;
  t.scheduler_threads = o.scheduler_threads;
  t.kv_capacity_tokens = (o.kv_tokens + 15) / 16 * 16;  // whole 16-position blocks
  t.metrics = o.metrics;
  t.scheduler_args = {"--allow-oracle", o.allow_oracle ? "true" : "false",
                      "--spec-policy", o.spec_policy};
  t.scheduler_args.insert(t.scheduler_args.end(), o.scheduler_args.begin(), o.scheduler_args.end());
  t.stage_args = o.stage_args;
  t.log_level = "warn";
  t.run_dir = dir_.string();
  // bench binaries live in <build>/bench, the processes at <build>.
  const launch::Binaries binaries =
      launch::FindBinaries(launch::ExecutableDir() + "/..", /*gateway=*/false);
  // The processes' logs go to a file, not into the table.
  log_ = (dir_ / "processes.log").string();
  launch::StartOptions start;
  start.timeout = std::chrono::seconds(120);
  start.log_path = log_;
  start.stop.grace = std::chrono::seconds(10);
  std::fflush(stdout);
  std::fflush(stderr);
  processes_.Start(t, binaries, launch::ModelLayers(o.model), start);
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  stub_ = internal::Scheduler::NewStub(grpc::CreateCustomChannel(
      launch::Loopback(processes_.scheduler().spec.grpc_port), grpc::InsecureChannelCredentials(), args));
}

Deployment::~Deployment() {
  launch::StopOptions stop;
  stop.grace = std::chrono::seconds(10);
  processes_.Stop(stop);
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::vector<std::string> Deployment::PaceGauges() const {
  const int port = processes_.scheduler().spec.metrics_port;
  if (port <= 0) return {};
  namespace http = boost::beast::http;
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket socket(io);
  socket.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  http::request<http::empty_body> request{http::verb::get, "/metrics", 11};
  request.set(http::field::host, "127.0.0.1");
  http::write(socket, request);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(socket, buffer, response);
  std::vector<std::string> lines;
  std::istringstream body(response.body());
  for (std::string line; std::getline(body, line);) {
    const bool pace = line.starts_with("specline_spec_decode_break_even_acceptance{") ||
                      line.starts_with("specline_spec_decode_token_interval_seconds{");
    // Series of policies that never measured hold NaN or 0.
    if (pace && !line.ends_with(" Nan") && !line.ends_with(" NaN") && !line.ends_with(" 0")) {
      lines.push_back(line);
    }
  }
  return lines;
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

double Deployment::CpuSeconds() {
  double total = 0;
  for (const launch::Child* c : processes_.all()) {
    std::ifstream in("/proc/" + std::to_string(c->pid) + "/stat");
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

}  // namespace specline::bench
