// The data plane's connection handshake (tcp://, and nccl://'s control
// connection): the receiver greets every new connection with its protocol,
// its frame limit and, when it has a cluster secret, a random challenge; a
// sender with the same secret answers with an HMAC-SHA256 proof and checks
// the receiver's proof in return. Until the handshake is done the receiver
// reads only tiny, bounded frames under a deadline. Wire format and the
// reasons: docs/transport.md ("Authentication and frame bounds").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "transport/transport.h"

namespace specline::transport {

// Which transport a connection belongs to: sent in the greeting (a sender
// that reached the other kind of receiver is told so) and bound into every
// proof (a tcp:// proof is no nccl:// proof).
enum class WireProtocol : uint8_t { kTcp = 'T', kNccl = 'N' };

inline constexpr uint32_t kAuthFrameMagic = 0x41505346;  // "FSPA" on the wire
inline constexpr uint8_t kAuthVersion = 1;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256
// The largest handshake frame either side reads.
inline constexpr size_t kMaxHandshakeFrameBytes = 256;

// INVALID_ARGUMENT when an option is out of range.
absl::Status CheckTransportOptions(const TransportOptions& options);

// The proofs: HMAC-SHA256(secret, label || receiver nonce || sender nonce)
// with the label "specline data plane v1 <sender|receiver> <T|N>".
std::string SenderProof(std::string_view secret, WireProtocol protocol,
                        std::string_view receiver_nonce, std::string_view sender_nonce);
std::string ReceiverProof(std::string_view secret, WireProtocol protocol,
                          std::string_view receiver_nonce, std::string_view sender_nonce);

// Receiver side, on a freshly accepted connection: greets the peer and, with
// a secret, checks its proof within options.handshake_timeout_ms, reading
// nothing larger than kMaxHandshakeFrameBytes. OK: frames may follow.
// Otherwise why the connection must be dropped (UNAUTHENTICATED: a wrong or
// missing proof, told to the peer; DEADLINE_EXCEEDED: too slow; others: the
// peer went away or spoke garbage).
absl::Status AcceptHandshake(int fd, WireProtocol protocol, const TransportOptions& options);

// Sender side, right after connecting to `address` (for messages): reads the
// greeting and, when the receiver asks for it, proves the secret and checks
// the receiver's proof. Returns the receiver's frame limit.
//   UNAUTHENTICATED: one end has a secret and the other none, the secrets
//     differ, or the receiver failed to prove the secret;
//   UNAVAILABLE: no greeting in time, the connection closed, the peer is not
//     a specline receiver of this protocol.
absl::StatusOr<size_t> ConnectHandshake(int fd, WireProtocol protocol,
                                        const TransportOptions& options,
                                        const std::string& address);

// "IP:PORT" of a connected socket's peer, for log lines ("?" if unknown).
std::string PeerName(int fd);

// Warnings about dropped connections, at most one line per `interval`
// (with the count of the ones left out since), so that a flood of bad
// connections cannot flood the log. Thread-safe.
class DropLog {
 public:
  explicit DropLog(std::string address,
                   std::chrono::steady_clock::duration interval = std::chrono::seconds(10))
      : address_(std::move(address)), interval_(interval) {}
  void Warn(std::string_view why);
  // How many drops were reported (logged or not), for tests.
  uint64_t count() const;

 private:
  std::string address_;
  std::chrono::steady_clock::duration interval_;
  mutable std::mutex mu_;
  std::chrono::steady_clock::time_point last_{};
  bool logged_any_ = false;
  uint64_t suppressed_ = 0;
  uint64_t count_ = 0;
};

}  // namespace specline::transport
