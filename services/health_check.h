// A grpc.health.v1 client (Check), used by the launcher and the tests.
// gRPC's C++ library serves the health service but ships no client stubs,
// so this sends the two tiny messages by hand over a generic stub.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/channel.h>
#include <grpcpp/support/status.h>

namespace specline {

enum class HealthState { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

// Calls grpc.health.v1.Health/Check for `service` ("" = the whole server).
// On an RPC error returns it and leaves *state as kUnknown.
grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                         std::chrono::milliseconds timeout, HealthState* state);

}  // namespace specline
