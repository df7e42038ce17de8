// gRPC status code names ("OK", "INVALID_ARGUMENT", ...): the gateway's
// failure-counter label and the load tester's error keys use the same ones.
#pragma once

#include <string>

namespace specline {

inline std::string StatusCodeName(int code) {
  static const char* const kNames[] = {
      "OK",           "CANCELLED",           "UNKNOWN",   "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
      "NOT_FOUND",    "ALREADY_EXISTS",      "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED",      "OUT_OF_RANGE", "UNIMPLEMENTED",  "INTERNAL",
      "UNAVAILABLE",  "DATA_LOSS",           "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(sizeof kNames / sizeof kNames[0])) return kNames[code];
  return "CODE_" + std::to_string(code);
}

}  // namespace specline
