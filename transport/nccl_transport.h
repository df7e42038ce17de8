// nccl:// activation transport for stage processes that each own a GPU:
// control and framing over one TCP connection per sender -> receiver link
// (the tcp:// socket code, with its own magic word), bulk bytes over NCCL
// point-to-point on a 2-rank communicator per link (sender rank 0, receiver
// rank 1). Design, wire format and failure behaviour: docs/transport.md.
//
// Messages
//   Send(message)            host bytes. Under `inline_limit` they travel in
//                            the TCP frame itself; larger ones are announced
//                            by a frame and go host -> pinned -> device
//                            staging -> ncclSend.
//   SendDevice(header, p, n) `header` in the TCP frame, `n` bytes at device
//                            pointer `p` straight from the caller's buffer
//                            over NCCL (no host bounce).
//   Both kinds interleave in order on one link; per sender, messages arrive
//   in the order they were sent (many senders may feed one receiver).
//
//   Receive()        a host message as sent; a device message as its header
//                    followed by its payload copied to the host (header +
//                    payload concatenated), so consumers that are not
//                    GPU-aware still see every byte.
//   ReceiveDevice()  a device message as {header, payload on this
//                    receiver's device}; a host message as {header = the
//                    message, no payload}.
//
// Readiness: Send/SendDevice return once the bytes have left the caller's
// buffers (the NCCL send completed), so they may be reused at once. A
// DeviceMessage's payload is complete when ReceiveDevice returns (the
// receiver waited for its copy), so it can be used on any stream of that
// device without an event.
//
// Same-device mode (NcclOptions::same_device): NCCL refuses two ranks of one
// communicator on one GPU, so a link whose two ends share a GPU cannot use
// the 2-rank communicator. In this mode (both ends in one process, one GPU)
// the receiver builds a 1-rank communicator from the sender's ncclUniqueId
// and moves each message with an ncclSend + ncclRecv to itself in one
// ncclGroupStart/End, reading the sender's buffer; framing, staging, events,
// ordering and failure handling are the same code as the 2-rank path. It
// exists so the data path can be tested on one GPU; production links
// (one process per GPU) use the 2-rank communicator.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/cuda/device_buffer.h"
#include "transport/transport.h"

namespace specline::transport {

// Magic word of nccl:// control frames (tcp_socket.h framing; tcp:// uses
// kFrameMagic), for tests and tools that speak the wire format
// (docs/transport.md).
inline constexpr uint32_t kNcclFrameMagic = 0x4e505346;  // "FSPN" on the wire

struct NcclOptions {
  // CUDA device of this end; -1: the calling thread's current device at
  // ListenNccl / ConnectNccl.
  int device = -1;
  // Send(): messages shorter than this travel over TCP only.
  size_t inline_limit = 4096;
  // Sender only: use the 1-rank same-device mode (see above) instead of the
  // 2-rank communicator. The receiver follows the sender's choice.
  bool same_device = false;
  // TCP connect timeout (unreachable hosts), as for tcp://.
  int connect_timeout_ms = 5000;
  // Longest wait for a communicator to come up or one transfer to finish;
  // past it the link is aborted (ncclCommAbort) and the call fails.
  int nccl_timeout_ms = 30000;
};

// A message sent with SendDevice, as ReceiveDevice hands it over.
struct DeviceMessage {
  std::string header;
  cuda::DeviceBuffer payload;  // on the receiver's device; payload_bytes valid
  size_t payload_bytes = 0;
};

class NcclSender : public ActivationSender {
 public:
  // Sends `header` and `n` bytes at `device_bytes` (memory of this sender's
  // device) as one message. The transfer waits for the work queued on
  // `producer` (a stream of this sender's device, or 0) so far through an
  // event: no host synchronization with the producer beyond that point.
  // Errors as Send(); INVALID_ARGUMENT for a bad stream or size.
  virtual absl::Status SendDevice(std::string_view header, const void* device_bytes, size_t n,
                                  cudaStream_t producer) = 0;
  virtual int device() const = 0;
  // How many times the link has been bootstrapped (communicator created):
  // 1 after the first successful Send, +1 per re-bootstrap after a failure
  // or a receiver restart.
  virtual int bootstraps() const = 0;
};

class NcclReceiver : public ActivationReceiver {
 public:
  // The next message as a device message (see above); Receive's errors.
  virtual absl::StatusOr<DeviceMessage> ReceiveDevice(std::chrono::milliseconds timeout) = 0;
  virtual int device() const = 0;
};

// `transport`: the control connection's handshake (cluster secret, as for
// tcp://: data_plane_auth.h) and the receiver's message limit: a host
// message, or a device message's header + payload, above
// transport.max_frame_bytes is refused and its link dropped before any
// staging is allocated for it.
// UNAVAILABLE when no CUDA device is usable or the port cannot be bound;
// INVALID_ARGUMENT for bad transport options.
absl::StatusOr<std::unique_ptr<NcclReceiver>> ListenNccl(const std::string& host, int port,
                                                         const NcclOptions& options = {},
                                                         const TransportOptions& transport = {});
// Lazy like tcp://: the first Send connects, runs the handshake and
// bootstraps the link. UNAVAILABLE when no CUDA device is usable;
// Send gives UNAUTHENTICATED when the handshake fails on the secret.
absl::StatusOr<std::unique_ptr<NcclSender>> ConnectNccl(const std::string& host, int port,
                                                        const NcclOptions& options = {},
                                                        const TransportOptions& transport = {});

}  // namespace specline::transport
