// Command-line parsing shared by the service binaries: "--name value" or
// "--name=value" pairs into a map, and numbers checked whole.
#pragma once

#include <charconv>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace specline {

// Every argument must be "--name value" or "--name=value"; the caller
// rejects names it does not know. A repeated flag's last value wins.
absl::StatusOr<std::map<std::string, std::string>> ParseFlagMap(int argc, char** argv);
// The same, every flag in command-line order: for binaries with repeatable
// flags.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseFlagList(int argc,
                                                                                char** argv);

// True when argv holds "--help" or "-h": the binary prints its usage to
// stdout and exits 0 (what image builds and people expect).
bool HelpRequested(int argc, char** argv);

// Parses all of `text` as a number of type T; the error names --flag.
template <typename T>
absl::Status ParseNumber(const std::string& flag, const std::string& text, T* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": \"", text, "\" is not a number"));
  }
  return absl::OkStatus();
}

// "on"/"true"/"1" or "off"/"false"/"0"; the error names --flag.
inline absl::Status ParseOnOff(const std::string& flag, const std::string& text, bool* out) {
  if (text == "on" || text == "true" || text == "1") {
    *out = true;
  } else if (text == "off" || text == "false" || text == "0") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": \"", text,
                                                   "\" is not on or off"));
  }
  return absl::OkStatus();
}

// "true"/"1" or "false"/"0"; the error names --flag.
inline absl::Status ParseBool(const std::string& flag, const std::string& text, bool* out) {
  if (text == "true" || text == "1") {
    *out = true;
  } else if (text == "false" || text == "0") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": \"", text,
                                                   "\" is not true or false"));
  }
  return absl::OkStatus();
}

}  // namespace specline
