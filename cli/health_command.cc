// `specline health`: one grpc.health.v1 Check against any specline process
// (gateway, scheduler or stage), exit 0 when SERVING. The health probe for
// hosts without native gRPC probes (exec probes, scripts, the deploy
// rehearsal) and a quick "is it up" for people.
#include <iostream>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "services/health_check.h"

namespace specline::cli {
namespace {

const char kHealthUsage[] = R"(usage: specline health --addr HOST:PORT [options]
  --addr HOST:PORT   the process's gRPC port
  --service NAME     the service to ask about (default "": the whole server)
  --timeout-ms N     deadline of the check (default 2000)
Prints SERVING, NOT_SERVING, SERVICE_UNKNOWN or the RPC error; exits 0 only
when SERVING, 1 otherwise, 2 on bad usage.
)";

const char* StateName(HealthState s) {
  switch (s) {
    case HealthState::kServing: return "SERVING";
    case HealthState::kNotServing: return "NOT_SERVING";
    case HealthState::kServiceUnknown: return "SERVICE_UNKNOWN";
    case HealthState::kUnknown: break;
  }
  return "UNKNOWN";
}

}  // namespace

int HealthCommand(int argc, char** argv) {
  Args args(argc, argv, 2, {"addr", "service", "timeout-ms"}, {"help"});
  if (args.Has("help")) {
    std::cout << kHealthUsage;
    return 0;
  }
  if (!args.Has("addr")) {
    std::cerr << "specline health: --addr is required\n" << kHealthUsage;
    return 2;
  }
  auto channel = grpc::CreateChannel(args.Str("addr"), grpc::InsecureChannelCredentials());
  HealthState state = HealthState::kUnknown;
  const grpc::Status st = CheckHealth(channel, args.Str("service"),
                                      std::chrono::milliseconds(args.Int("timeout-ms", 2000)), &state);
  if (!st.ok()) {
    std::cout << "error: " << st.error_code() << " " << st.error_message() << "\n";
    return 1;
  }
  std::cout << StateName(state) << "\n";
  return state == HealthState::kServing ? 0 : 1;
}

}  // namespace specline::cli
