// In-process transport: stages sharing one address space hand messages over
// through a process-wide registry of named inboxes. No serialization beyond
// the caller's, no sockets.
#pragma once

#include <memory>
#include <string>

#include "transport/transport.h"

namespace specline::transport {

// ALREADY_EXISTS when a live receiver holds `name`; the name is free again
// once that receiver shut down or was destroyed.
absl::StatusOr<std::unique_ptr<ActivationReceiver>> ListenInproc(const std::string& name);
// Resolved at each Send, so the sender survives its receiver being replaced.
std::unique_ptr<ActivationSender> ConnectInproc(const std::string& name);

}  // namespace specline::transport
