// specline-scheduler: the pipeline driver process. Opens the model for its
// config and output head only, listens for the last stage's output, drives
// the stages named by --stage-grpc, and serves the Scheduler gRPC API,
// grpc.health.v1, reflection and /metrics. SIGTERM/SIGINT: stop admitting,
// let running requests finish (up to --drain-timeout-ms), exit 0.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>

#include "nlohmann/json.hpp"
#include "common/flag_map.h"
#include "common/listen_error.h"
#include "common/metrics_server.h"
#include "common/port_file.h"
#include "common/stop_signals.h"
#include "scheduler/flags.h"
#include "scheduler/scheduler_service.h"
#include "spdlog/spdlog.h"

namespace {

using namespace specline;
using namespace specline::scheduler;


int Run(const SchedulerFlags& flags, const sigset_t& stop_signals) {
  std::shared_ptr<const ModelSource> model = OpenModel(flags.model);
  // The last stage's output and the taps arrive here, from stages that
  // prove the cluster secret (docs/security.md).
  transport::TransportOptions data_plane;
  data_plane.secret = flags.cluster_secret;
  auto inbox = transport::Listen(flags.data_listen, data_plane);
  if (!inbox.ok()) {
    spdlog::critical("--data-listen {}: {}", flags.data_listen, inbox.status().ToString());
    return IsCannotListen(inbox.status()) ? kExitCannotListen : 1;
  }
  std::vector<std::unique_ptr<StageControl>> stages;
  for (const std::string& addr : flags.stage_grpc) {
    stages.push_back(ConnectStageControl(addr, flags.cluster_secret));
  }
  auto metrics = std::make_shared<SchedulerMetrics>();
  EngineOptions engine_options = flags.engine;
  engine_options.data_plane = data_plane;
  // Declared before the engine, which records into its log, so it outlives it.
  std::unique_ptr<KvEventPublisher> kv_events;
  if (flags.kv_events.enable_kv_cache_events && flags.kv_events.publisher == "zmq") {
    absl::StatusOr<std::unique_ptr<KvEventPublisher>> started = KvEventPublisher::Start(flags.kv_events);
    if (!started.ok()) {
      spdlog::critical("--kv-events-config: {}", started.status().ToString());
      return kExitCannotListen;
    }
    kv_events = *std::move(started);
    engine_options.kv_events = kv_events->log();
  }
  Engine engine(model, std::move(stages), *std::move(inbox), engine_options, metrics);
  const std::string data_address = engine.inbox_address();

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  absl::StatusOr<std::unique_ptr<ResponseFormats>> formats =
      ResponseFormats::Open(*model, flags.tokenizer);
  if (!formats.ok()) {
    if (!flags.tokenizer.empty()) {
      spdlog::critical("--tokenizer {}: {}", flags.tokenizer, formats.status().ToString());
      return 1;
    }
    spdlog::info("structured output is off: {}", std::string(formats.status().message()));
  }
  SchedulerService service(engine, flags.cluster_secret,
                           formats.ok() ? formats->get() : nullptr);
  if (kv_events) {
    internal::KvEventsSource source;
    source.set_endpoint(kv_events->endpoint());
    source.set_replay_endpoint(kv_events->replay_endpoint());
    source.set_topic(kv_events->config().topic);
    source.set_hwm(kv_events->config().hwm);
    source.set_buffer_steps(kv_events->config().buffer_steps);
    service.set_kv_events(std::move(source));
  }
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT: a second server on a taken port must fail to bind, not
  // share its connections (common/listen_error.h).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // The gateway pings every second to notice a stopped scheduler (gateway
  // keepalive): allow it, also between streams.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  int grpc_port = 0;
  builder.AddListeningPort(flags.host + ":" + std::to_string(flags.grpc_port),
                           grpc::InsecureServerCredentials(), &grpc_port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || grpc_port == 0) {
    spdlog::critical("cannot listen on {}:{}", flags.host, flags.grpc_port);
    return kExitCannotListen;
  }
  std::unique_ptr<MetricsServer> metrics_server;
  int metrics_port = -1;
  if (flags.metrics_port >= 0) {
    metrics_server = std::make_unique<MetricsServer>(flags.host, flags.metrics_port);
    metrics_server->Register(metrics->registry);
    metrics_port = metrics_server->port();
  }
  engine.Start();

  // Health follows the pipeline: NOT_SERVING while a stage is down or while
  // draining, so load balancers and the gateway route around it.
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  std::atomic<bool> draining{false}, done{false};
  std::thread health_updater([&] {
    int last = -1;
    while (!done.load()) {
      const int serving = engine.up() && !draining.load();
      if (serving != last) {
        health->SetServingStatus(serving);
        health->SetServingStatus("specline.internal.Scheduler", serving);
        last = serving;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  nlohmann::json ports = {
      {"grpc", grpc_port}, {"data", data_address}, {"metrics", metrics_port}, {"pid", getpid()}};
  if (kv_events) ports["kv_events"] = kv_events->endpoint();
  bool port_file_written = true;
  try {
    if (!flags.port_file.empty()) WritePortFile(flags.port_file, ports);
  } catch (const std::exception& e) {
    spdlog::critical("--port-file: {}", e.what());
    port_file_written = false;
  }
  if (!port_file_written) {
    done = true;
    health_updater.join();
    return 1;
  }
  spdlog::info("ready: {}", ports.dump());

  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("signal {}: draining ({} requests active, up to {} ms)", sig, engine.active(),
               flags.drain_timeout_ms);
  draining = true;
  engine.StopAdmitting();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(flags.drain_timeout_ms);
  while (engine.active() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (engine.active() > 0) spdlog::warn("drain timeout: failing {} requests", engine.active());
  engine.Stop();  // ends what is left with UNAVAILABLE
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  done = true;
  health_updater.join();
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (HelpRequested(argc, argv)) {
    std::fputs(SchedulerUsage().c_str(), stdout);
    return 0;
  }
  const sigset_t stop_signals = BlockStopSignals();

  auto flags = ParseSchedulerFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "specline-scheduler: %s\n%s",
                 std::string(flags.status().message()).c_str(), SchedulerUsage().c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(flags->log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [scheduler] %v");
  try {
    return Run(*flags, stop_signals);
  } catch (const ListenError& e) {
    spdlog::critical("cannot start: {}", e.what());
    return kExitCannotListen;
  } catch (const std::exception& e) {
    spdlog::critical("cannot start: {}", e.what());
    return 1;
  }
}
