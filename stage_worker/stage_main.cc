// specline-stage: one pipeline stage process (or several consecutive stages
// sharing one process). See stage_flags.h for the command line.
#include <signal.h>

#include <cstdio>
#include <exception>

#include "common/flag_map.h"
#include "common/listen_error.h"
#include "common/port_file.h"
#include "common/stop_signals.h"
#include "spdlog/spdlog.h"
#include "stage_worker/stage_flags.h"
#include "stage_worker/stage_process.h"

int main(int argc, char** argv) {
  if (specline::HelpRequested(argc, argv)) {
    std::fputs(specline::kStageUsage, stdout);
    return 0;
  }
  const sigset_t stop_signals = specline::BlockStopSignals();

  auto flags = specline::ParseStageFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "specline-stage: %s\n%s", std::string(flags.status().message()).c_str(),
                 specline::kStageUsage);
    return 2;
  }
  spdlog::set_level(spdlog::level::from_str(flags->log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [stage " + std::to_string(flags->stage) +
                      "] %v");

  std::unique_ptr<specline::StageProcess> process;
  try {
    auto started = specline::StageProcess::Start(*flags);
    if (!started.ok()) {
      spdlog::critical("cannot start: {}", started.status().ToString());
      return specline::IsCannotListen(started.status()) ? specline::kExitCannotListen : 1;
    }
    process = std::move(*started);
  } catch (const std::exception& e) {
    spdlog::critical("cannot start: {}", e.what());
    return 1;
  }
  if (!flags->port_file.empty()) {
    try {
      specline::WritePortFile(flags->port_file, process->PortInfo());
    } catch (const std::exception& e) {
      spdlog::critical("--port-file: {}", e.what());
      return 1;
    }
  }
  spdlog::info("ready: {}", process->PortInfo().dump());

  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("signal {}: stopping", sig);
  process->Stop();
  spdlog::info("stopped");
  return 0;
}
