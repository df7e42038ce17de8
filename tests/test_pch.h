// The headers the test suites share, precompiled once (with
// specline_test_util) and reused by every suite that links it
// (tests/CMakeLists.txt, SPECLINE_PCH): the standard library,
// GoogleTest, nlohmann/json, gRPC and the generated protos, Abseil's
// status types, spdlog, Boost.Beast. Third-party and generated headers only:
// editing the project's own headers does not rebuild it. Transport and
// xgrammar headers stay out (their targets add definitions not every suite
// has, and a precompiled header must see the same definitions).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "specline/internal/scheduler.grpc.pb.h"
#include "specline/internal/stage.grpc.pb.h"
#include "specline/v1/generation.grpc.pb.h"
