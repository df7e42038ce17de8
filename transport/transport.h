// Activation transport: moves serialized micro-batches (MicroBatch protos)
// between pipeline processes. gRPC carries control only; activations take
// this path. Implementations: in-process queues (stages sharing a process),
// a host transport for CPU stages in other processes or hosts, and NCCL for
// stage processes that each own a GPU (nccl_transport.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specline::transport {

// Sends to one destination. Thread-compatible (one sender per thread).
class ActivationSender {
 public:
  virtual ~ActivationSender() = default;
  // Delivers one message, in order with earlier ones. Reconnects when the
  // peer restarted. UNAVAILABLE when the peer cannot be reached (the
  // message is then lost: the pipeline treats it as a failed batch).
  virtual absl::Status Send(std::string_view message) = 0;
  virtual const std::string& address() const = 0;
};

// One inbox that any number of senders deliver to.
class ActivationReceiver {
 public:
  virtual ~ActivationReceiver() = default;
  // The next message, waiting up to `timeout`: DEADLINE_EXCEEDED when none
  // came, CANCELLED after Shutdown().
  virtual absl::StatusOr<std::string> Receive(std::chrono::milliseconds timeout) = 0;
  // Wakes Receive callers and stops accepting.
  virtual void Shutdown() = 0;
  // Where senders reach it: "tcp://127.0.0.1:43121", "inproc://stage-1".
  virtual const std::string& address() const = 0;
  // Messages received and not yet taken by Receive (a stage's queue depth).
  virtual size_t pending() const = 0;
};

// The largest frame any transport accepts (a u32 length; tcp_socket.h). A
// micro-batch of 64 slots x dim 8192 fp32 is 2 MiB: receivers should set
// TransportOptions::max_frame_bytes to what their configuration can get.
inline constexpr size_t kMaxFrameBytes = size_t{1} << 30;

// Security and limits of a socket transport end (tcp://, nccl://'s control
// connection; inproc:// ignores them). Wire format and reasons:
// docs/transport.md ("Authentication and frame bounds").
struct TransportOptions {
  // Shared cluster secret (any bytes; 32 random bytes recommended). Set on a
  // receiver, every connection must prove it knows the same secret
  // (HMAC-SHA256 challenge-response) before any frame is read; set on a
  // sender, the receiver must prove it too. Empty on both ends: no
  // authentication. A mismatch (one end without a secret, different
  // secrets) fails the sender's Send with UNAUTHENTICATED naming the cause.
  std::string secret;
  // Receiver: a frame (for nccl://, a message) announcing more is refused
  // and its connection dropped; memory grows only as bytes arrive. Sender:
  // larger messages fail with INVALID_ARGUMENT, as do messages above the
  // limit the receiver announced in the handshake. At most kMaxFrameBytes.
  size_t max_frame_bytes = kMaxFrameBytes;
  // Receiver: how long a new connection may take to complete the handshake
  // before it is dropped. Sender: how long it waits for the receiver's
  // greeting and verdict.
  int handshake_timeout_ms = 2000;
  // Receiver: connections still in the handshake at once; more are closed
  // at accept, so a flood cannot pin threads (each lasts at most
  // handshake_timeout_ms).
  int max_handshakes = 64;
  // Receiver: open connections at once (handshaking or not); more are
  // closed at accept.
  int max_connections = 1024;
};

// A parsed address: scheme "tcp" or "nccl" (host, port) or "inproc" (name).
struct Address {
  std::string scheme;
  std::string host;  // tcp, nccl: name or literal, IPv6 without brackets
  int port = 0;      // tcp, nccl
  std::string name;  // inproc
};
// INVALID_ARGUMENT naming the address when it is not one of the forms above.
absl::StatusOr<Address> ParseAddress(const std::string& address);

// Addresses: "tcp://HOST:PORT" (PORT 0 picks a free port; address() tells
// which), "inproc://NAME" (a process-wide registry of inboxes) or
// "nccl://HOST:PORT" (control over TCP at HOST:PORT, bulk bytes over NCCL on
// the current CUDA device; UNIMPLEMENTED in a build without NCCL,
// UNAVAILABLE without a usable device).
// INVALID_ARGUMENT for options out of range (max_frame_bytes 0 or above
// kMaxFrameBytes, a non-positive timeout or limit).
absl::StatusOr<std::unique_ptr<ActivationReceiver>> Listen(const std::string& address,
                                                           const TransportOptions& options);
absl::StatusOr<std::unique_ptr<ActivationReceiver>> Listen(const std::string& address);
// Connecting is lazy: the first Send connects (and authenticates), so a
// sender can be made before its peer is up.
absl::StatusOr<std::unique_ptr<ActivationSender>> Connect(const std::string& address,
                                                          const TransportOptions& options);
absl::StatusOr<std::unique_ptr<ActivationSender>> Connect(const std::string& address);

}  // namespace specline::transport
