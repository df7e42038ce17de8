// Thin POSIX socket helpers for the TCP transport, all returning
// absl::Status with the failing call and errno spelled out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specline::transport {

// Frame = 8-byte header + payload. The header is a magic word (rejects a
// peer that is not speaking this protocol, e.g. an HTTP probe sent to the
// data port) and the payload length, both little-endian u32.
inline constexpr uint32_t kFrameMagic = 0x4c505346;  // "FSPL" on the wire
inline constexpr size_t kFrameHeaderBytes = 8;
// Larger frames are refused: a garbage length must not make us allocate
// gigabytes. A micro-batch of 64 slots x dim 8192 fp32 is 2 MiB.
inline constexpr size_t kMaxFrameBytes = size_t{1} << 30;

// `magic` tells protocols apart on the wire: tcp:// frames carry kFrameMagic,
// nccl:// control frames their own word, so a peer speaking the other
// protocol is refused at its first frame.
void EncodeFrameHeader(uint32_t length, unsigned char out[kFrameHeaderBytes],
                       uint32_t magic = kFrameMagic);
// The payload length, or INVALID_ARGUMENT for a bad magic or oversize length.
absl::StatusOr<uint32_t> DecodeFrameHeader(const unsigned char in[kFrameHeaderBytes],
                                           uint32_t magic = kFrameMagic);

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
// UNAVAILABLE on a reset or EOF mid-way.
absl::Status ReadExact(int fd, void* buf, size_t n);
// Reads one whole frame into `*payload`: ReadExact's errors, or
// INVALID_ARGUMENT (from DecodeFrameHeader) for a peer not speaking `magic`.
absl::Status ReadFrame(int fd, std::string* payload, uint32_t magic = kFrameMagic);
// True when the peer has closed or reset the connection (non-blocking check).
// For the sending side of a connection whose peer never writes: pending
// data counts as closed.
bool PeerClosed(int fd);
// True when the peer has closed or reset the connection, ignoring any data
// it sent that is still unread (non-blocking check).
bool PeerHungUp(int fd);

}  // namespace specline::transport
