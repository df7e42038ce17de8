// "Cannot bind the port I was given", told apart from every other start-up
// failure. `specline serve` picks its children's ports before it starts them,
// and another process can take one in between; a child that exits with
// kExitCannotListen tells the launcher that a retry with fresh ports can
// succeed, where a bad model file or flag would fail the same way again.
#pragma once

#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace specline {

inline constexpr int kExitCannotListen = 75;  // sysexits.h's EX_TEMPFAIL: try again

// Thrown by servers that cannot bind (MetricsServer, the gateway).
class ListenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr char kCannotListenPayload[] = "type.specline.dev/cannot-listen";

// An UNAVAILABLE status that IsCannotListen recognises.
inline absl::Status CannotListenError(const std::string& message) {
  absl::Status st = absl::UnavailableError(message);
  st.SetPayload(kCannotListenPayload, absl::Cord("1"));
  return st;
}

inline bool IsCannotListen(const absl::Status& st) {
  return st.GetPayload(kCannotListenPayload).has_value();
}

}  // namespace specline
