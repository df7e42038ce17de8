// The third-party and generated headers the scheduler's and the stage
// worker's sources share (gRPC and the generated protos, Abseil's status
// types, spdlog, nlohmann/json), precompiled once per library
// (CMakeLists.txt, SPECLINE_PCH). Only what never changes with the
// project's own code, so editing a project header does not rebuild it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "specline/internal/scheduler.grpc.pb.h"
#include "specline/internal/stage.grpc.pb.h"
#include "specline/v1/generation.grpc.pb.h"
