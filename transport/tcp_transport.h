// Host transport over TCP: length-prefixed frames (tcp_socket.h), one
// connection per sender, TCP_NODELAY. Every connection opens with the
// data-plane handshake (data_plane_auth.h): the receiver's greeting and, with
// a cluster secret, a challenge-response. The receiver runs one accept
// thread and one reader thread per connection, all feeding one inbox, so
// many senders (the scheduler and a previous stage, or several clients in
// tests) can deliver to one stage. Design and measurements:
// docs/transport.md.
#pragma once

#include <memory>
#include <string>

#include "transport/transport.h"

namespace specline::transport {

// INVALID_ARGUMENT for bad options (CheckTransportOptions).
absl::StatusOr<std::unique_ptr<ActivationReceiver>> ListenTcp(
    const std::string& host, int port, const TransportOptions& options = {});
// Connects on the first Send. A Send that finds the connection closed or
// broken reconnects once and resends; if that fails too it returns
// UNAVAILABLE naming the address (UNAUTHENTICATED when the handshake failed
// on the secret).
std::unique_ptr<ActivationSender> ConnectTcp(const std::string& host, int port,
                                             int connect_timeout_ms = 5000,
                                             const TransportOptions& options = {});

}  // namespace specline::transport
