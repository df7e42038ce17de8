// The gateway library's precompiled header: the serving libraries' (gRPC,
// the generated protos, Abseil, spdlog, nlohmann/json) and Boost.Beast's
// HTTP types, which every endpoint family includes through
// services/openai/http_exchange.h (CMakeLists.txt, SPECLINE_PCH).
#pragma once

#include "serving_pch.h"

#include <boost/beast/http.hpp>
