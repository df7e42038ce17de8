// Small helpers shared by the API's C++ clients (`specline client`, the
// load tester): reading secret files and naming finish reasons.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "specline/v1/generation.pb.h"

namespace specline {

// A file's contents without trailing whitespace (bearer tokens, PEM roots).
inline std::string ReadTrimmedFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  s.erase(s.find_last_not_of(" \t\r\n") + 1);
  return s;
}

inline const char* FinishReasonName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_ABORT: return "abort";
    default: return "none";
  }
}

}  // namespace specline
