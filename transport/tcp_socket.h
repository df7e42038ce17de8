// Thin POSIX socket helpers for the TCP transport, all returning
// absl::Status with the failing call and errno spelled out.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/transport.h"  // kMaxFrameBytes

namespace specline::transport {

// Frame = 8-byte header + payload. The header is a magic word (rejects a
// peer that is not speaking this protocol, e.g. an HTTP probe sent to the
// data port) and the payload length, both little-endian u32.
inline constexpr uint32_t kFrameMagic = 0x4c505346;  // "FSPL" on the wire
inline constexpr size_t kFrameHeaderBytes = 8;
// Frames above kMaxFrameBytes (transport.h) are never written; a reader
// refuses more than the limit it is given (a receiver's
// TransportOptions::max_frame_bytes) and never allocates for bytes that have
// not arrived (ReadFrame).

// Reads bounded by a deadline (the handshake) poll before each recv;
// kNoDeadline reads block in recv as long as it takes.
using Deadline = std::chrono::steady_clock::time_point;
inline constexpr Deadline kNoDeadline = Deadline::max();

// `magic` tells protocols apart on the wire: tcp:// frames carry kFrameMagic,
// nccl:// control frames their own word, so a peer speaking the other
// protocol is refused at its first frame.
void EncodeFrameHeader(uint32_t length, unsigned char out[kFrameHeaderBytes],
                       uint32_t magic = kFrameMagic);
// The payload length, or INVALID_ARGUMENT for a bad magic or a length above
// `max_bytes`.
absl::StatusOr<uint32_t> DecodeFrameHeader(const unsigned char in[kFrameHeaderBytes],
                                           uint32_t magic = kFrameMagic,
                                           size_t max_bytes = kMaxFrameBytes);

// Listening socket bound to host:port (port 0 = any free port); `*bound_port`
// receives the port actually bound.
absl::StatusOr<int> ListenSocket(const std::string& host, int port, int* bound_port);
// Connected socket (TCP_NODELAY set), giving up after timeout_ms.
absl::StatusOr<int> ConnectSocket(const std::string& host, int port, int timeout_ms);
void SetNoDelay(int fd);

// Writes header + payload with one sendmsg per chunk, MSG_NOSIGNAL so a dead
// peer gives EPIPE instead of killing the process.
absl::Status WriteFrame(int fd, const char* data, size_t size);
// The same for a payload given in pieces (written without joining them) and
// any magic word. INVALID_ARGUMENT when the pieces exceed kMaxFrameBytes.
absl::Status WriteFrameParts(int fd, uint32_t magic, std::initializer_list<std::string_view> parts);
// Reads exactly n bytes; OUT_OF_RANGE on a clean EOF before the first byte,
// UNAVAILABLE on a reset or EOF mid-way, DEADLINE_EXCEEDED when `deadline`
// passes first.
absl::Status ReadExact(int fd, void* buf, size_t n, Deadline deadline = kNoDeadline);
// Reads one whole frame into `*payload`: ReadExact's errors, or
// INVALID_ARGUMENT (from DecodeFrameHeader) for a peer not speaking `magic`
// or announcing more than `max_bytes`. The payload grows as its bytes
// arrive (kReadStepBytes below), so a header announcing a large frame
// followed by nothing costs nothing.
absl::Status ReadFrame(int fd, std::string* payload, uint32_t magic = kFrameMagic,
                       size_t max_bytes = kMaxFrameBytes, Deadline deadline = kNoDeadline);
// ReadFrame's growth: the first step of a payload is at most kFirstReadStep
// bytes; each later one at most what has arrived so far, and at most
// kReadStepBytes. Memory touched ahead of the peer's bytes is therefore at
// most max(kFirstReadStep, received) and never above kReadStepBytes.
inline constexpr size_t kFirstReadStep = size_t{64} << 10;
inline constexpr size_t kReadStepBytes = size_t{1} << 20;
// True when the peer has closed or reset the connection (non-blocking check).
// For the sending side of a connection whose peer never writes: pending
// data counts as closed.
bool PeerClosed(int fd);
// True when the peer has closed or reset the connection, ignoring any data
// it sent that is still unread (non-blocking check).
bool PeerHungUp(int fd);

}  // namespace specline::transport
