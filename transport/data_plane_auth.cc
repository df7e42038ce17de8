#include "transport/data_plane_auth.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "transport/tcp_socket.h"

namespace specline::transport {
namespace {

// Greeting: version u8 | protocol u8 | flags u8 | reserved u8 (0) |
//           max_frame_bytes u32 LE | [receiver nonce, 32 B: flags & kAuth]
constexpr uint8_t kFlagAuth = 1;
constexpr size_t kGreetingFixedBytes = 8;
// Verdict: 'Y' | receiver proof (32 B), or 'N' | why (text).
constexpr char kAccepted = 'Y';
constexpr char kRefused = 'N';

using Clock = std::chrono::steady_clock;

const char* SchemeOf(uint8_t protocol) {
  switch (protocol) {
    case static_cast<uint8_t>(WireProtocol::kTcp):
      return "tcp://";
    case static_cast<uint8_t>(WireProtocol::kNccl):
      return "nccl://";
    default:
      return "unknown";
  }
}

absl::StatusOr<std::string> RandomBytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    return absl::InternalError("RAND_bytes failed: no randomness for the handshake nonce");
  }
  return out;
}

std::string Proof(std::string_view secret, std::string_view role, WireProtocol protocol,
                  std::string_view receiver_nonce, std::string_view sender_nonce) {
  std::string message = "specline data plane v1 ";
  message.append(role);
  message.push_back(' ');
  message.push_back(static_cast<char>(protocol));
  message.append(receiver_nonce);
  message.append(sender_nonce);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &len);
  return std::string(reinterpret_cast<const char*>(mac), len);
}

bool SameProof(std::string_view a, std::string_view b) {
  return a.size() == kProofBytes && b.size() == kProofBytes &&
         CRYPTO_memcmp(a.data(), b.data(), kProofBytes) == 0;
}

// Best effort: the peer may already be gone.
void Refuse(int fd, std::string_view why) {
  (void)WriteFrameParts(fd, kAuthFrameMagic, {std::string_view(&kRefused, 1), why});
}

Deadline DeadlineIn(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

}  // namespace

absl::Status CheckTransportOptions(const TransportOptions& o) {
  if (o.max_frame_bytes == 0 || o.max_frame_bytes > kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("max_frame_bytes must be in [1, ",
                                                   kMaxFrameBytes, "], got ", o.max_frame_bytes));
  }
  if (o.handshake_timeout_ms <= 0 || o.max_handshakes <= 0 || o.max_connections <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("handshake_timeout_ms (", o.handshake_timeout_ms, "), max_handshakes (",
                     o.max_handshakes, ") and max_connections (", o.max_connections,
                     ") must be positive"));
  }
  return absl::OkStatus();
}

std::string SenderProof(std::string_view secret, WireProtocol protocol,
                        std::string_view receiver_nonce, std::string_view sender_nonce) {
  return Proof(secret, "sender", protocol, receiver_nonce, sender_nonce);
}

std::string ReceiverProof(std::string_view secret, WireProtocol protocol,
                          std::string_view receiver_nonce, std::string_view sender_nonce) {
  return Proof(secret, "receiver", protocol, receiver_nonce, sender_nonce);
}

absl::Status AcceptHandshake(int fd, WireProtocol protocol, const TransportOptions& options) {
  const bool auth = !options.secret.empty();
  std::string nonce;
  if (auth) {
    absl::StatusOr<std::string> n = RandomBytes(kNonceBytes);
    if (!n.ok()) return n.status();
    nonce = std::move(*n);
  }
  const uint32_t limit = static_cast<uint32_t>(std::min(options.max_frame_bytes, kMaxFrameBytes));
  std::string greeting;
  greeting.push_back(static_cast<char>(kAuthVersion));
  greeting.push_back(static_cast<char>(protocol));
  greeting.push_back(static_cast<char>(auth ? kFlagAuth : 0));
  greeting.push_back('\0');
  for (int i = 0; i < 4; ++i) greeting.push_back(static_cast<char>(limit >> (8 * i)));
  greeting += nonce;
  const Deadline deadline = DeadlineIn(options.handshake_timeout_ms);
  if (absl::Status st = WriteFrameParts(fd, kAuthFrameMagic, {greeting}); !st.ok()) return st;
  if (!auth) return absl::OkStatus();

  std::string answer;
  absl::Status st = ReadFrame(fd, &answer, kAuthFrameMagic, kMaxHandshakeFrameBytes, deadline);
  if (absl::IsDeadlineExceeded(st)) {
    Refuse(fd, "no answer to the challenge in time");
    return absl::DeadlineExceededError(absl::StrCat(
        "no answer to the authentication challenge within ", options.handshake_timeout_ms, " ms"));
  }
  if (absl::IsInvalidArgument(st)) {
    Refuse(fd, "expected the answer to the authentication challenge");
    return absl::UnauthenticatedError(
        absl::StrCat("the peer sent something else than an answer to the challenge: ",
                     st.message()));
  }
  if (!st.ok()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the peer went away without answering the challenge (a sender without the cluster "
        "secret?): ",
        st.message()));
  }
  if (answer.size() != kNonceBytes + kProofBytes) {
    Refuse(fd, "malformed answer to the authentication challenge");
    return absl::UnauthenticatedError(
        absl::StrCat("malformed answer to the challenge (", answer.size(), " bytes)"));
  }
  const std::string_view sender_nonce = std::string_view(answer).substr(0, kNonceBytes);
  const std::string_view proof = std::string_view(answer).substr(kNonceBytes);
  if (!SameProof(proof, SenderProof(options.secret, protocol, nonce, sender_nonce))) {
    Refuse(fd, "authentication failed: wrong cluster secret");
    return absl::UnauthenticatedError("wrong proof of the cluster secret");
  }
  const std::string mine = ReceiverProof(options.secret, protocol, nonce, sender_nonce);
  return WriteFrameParts(fd, kAuthFrameMagic, {std::string_view(&kAccepted, 1), mine});
}

absl::StatusOr<size_t> ConnectHandshake(int fd, WireProtocol protocol,
                                        const TransportOptions& options,
                                        const std::string& address) {
  const Deadline deadline = DeadlineIn(options.handshake_timeout_ms);
  std::string greeting;
  absl::Status st =
      ReadFrame(fd, &greeting, kAuthFrameMagic, kMaxHandshakeFrameBytes, deadline);
  if (absl::IsDeadlineExceeded(st)) {
    return absl::UnavailableError(absl::StrCat(address, " sent no greeting within ",
                                               options.handshake_timeout_ms,
                                               " ms (is it a specline receiver?)"));
  }
  if (absl::IsInvalidArgument(st)) {
    return absl::UnavailableError(absl::StrCat(
        address, " did not greet like a specline data-plane receiver: ", st.message()));
  }
  if (!st.ok()) {
    return absl::UnavailableError(
        absl::StrCat(address, " closed the connection before greeting (at its connection "
                              "limit, or shutting down?): ",
                     st.message()));
  }
  if (greeting.size() < kGreetingFixedBytes) {
    return absl::UnavailableError(absl::StrCat(address, " sent a malformed greeting"));
  }
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(greeting[i]); };
  if (byte(0) != kAuthVersion) {
    return absl::UnavailableError(absl::StrCat(address, " speaks handshake version ", byte(0),
                                               "; this sender speaks ", kAuthVersion));
  }
  if (byte(1) != static_cast<uint8_t>(protocol)) {
    return absl::UnavailableError(absl::StrCat(address, " is a ", SchemeOf(byte(1)),
                                               " receiver, not an ",
                                               SchemeOf(static_cast<uint8_t>(protocol)),
                                               " receiver"));
  }
  const bool auth = byte(2) & kFlagAuth;
  const size_t limit = size_t{byte(4)} | size_t{byte(5)} << 8 | size_t{byte(6)} << 16 |
                       size_t{byte(7)} << 24;
  if (auth && options.secret.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        address, " requires the cluster secret and this sender has none configured"));
  }
  if (!auth && !options.secret.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(
        address, " has no cluster secret configured (it accepts unauthenticated senders); this "
                 "sender has one and refuses to send to it: configure the same secret on both "
                 "ends"));
  }
  if (!auth) return limit;
  if (greeting.size() != kGreetingFixedBytes + kNonceBytes) {
    return absl::UnavailableError(absl::StrCat(address, " sent a malformed challenge"));
  }
  const std::string receiver_nonce = greeting.substr(kGreetingFixedBytes);
  absl::StatusOr<std::string> sender_nonce = RandomBytes(kNonceBytes);
  if (!sender_nonce.ok()) return sender_nonce.status();
  const std::string proof =
      SenderProof(options.secret, protocol, receiver_nonce, *sender_nonce);
  if (st = WriteFrameParts(fd, kAuthFrameMagic, {*sender_nonce, proof}); !st.ok()) {
    return absl::UnavailableError(
        absl::StrCat("authenticating to ", address, " failed: ", st.message()));
  }
  std::string verdict;
  st = ReadFrame(fd, &verdict, kAuthFrameMagic, kMaxHandshakeFrameBytes, deadline);
  if (!st.ok()) {
    return absl::UnavailableError(absl::StrCat(address, " gave no authentication verdict: ",
                                               st.message()));
  }
  if (!verdict.empty() && verdict[0] == kRefused) {
    return absl::UnauthenticatedError(absl::StrCat(
        address, " refused this sender: ", verdict.substr(1),
        " (the two ends are configured with different secrets?)"));
  }
  if (verdict.size() != 1 + kProofBytes || verdict[0] != kAccepted ||
      !SameProof(std::string_view(verdict).substr(1),
                 ReceiverProof(options.secret, protocol, receiver_nonce, *sender_nonce))) {
    return absl::UnauthenticatedError(absl::StrCat(
        address, " could not prove that it knows the cluster secret (not the receiver it "
                 "claims to be?)"));
  }
  return limit;
}

std::string PeerName(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
    return absl::StrCat(host, ":", port);
  }
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return absl::StrCat("[", host, "]:", port);
  }
  return "?";
}

void DropLog::Warn(std::string_view why) {
  uint64_t suppressed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
    const Clock::time_point now = Clock::now();
    if (logged_any_ && now - last_ < interval_) {
      ++suppressed_;
      return;
    }
    logged_any_ = true;
    last_ = now;
    suppressed = suppressed_;
    suppressed_ = 0;
  }
  if (suppressed > 0) {
    spdlog::warn("transport {}: dropping connection: {} ({} more dropped connections not logged)",
                 address_, std::string(why), suppressed);
  } else {
    spdlog::warn("transport {}: dropping connection: {}", address_, std::string(why));
  }
}

uint64_t DropLog::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

}  // namespace specline::transport
