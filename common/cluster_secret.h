// The internal plane's shared secret (docs/security.md). The gateway, the
// scheduler and the stages of one deployment hold the same secret (a file
// that `specline serve` writes, or that the Helm chart mounts from a
// Secret); every internal RPC carries it as metadata and the receiving
// service refuses calls without it. The activation transport proves it with
// an HMAC challenge instead (transport/data_plane_auth.h), so the secret
// itself never crosses the data plane.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace specline {

inline constexpr char kClusterSecretMetadata[] = "x-specline-cluster-secret";
// Shorter secrets are refused: a secret is there to be unguessable.
inline constexpr size_t kMinClusterSecretBytes = 32;

// Reads --cluster-secret-file (trailing whitespace trimmed). INVALID_ARGUMENT
// naming the file when it cannot be read or is too short.
absl::StatusOr<std::string> ReadClusterSecret(const std::string& path);

// `bytes` random bytes from the kernel's CSPRNG, in hex: unguessable ids.
std::string RandomHex(size_t bytes);
// A fresh random secret (RandomHex(32)).
inline std::string NewClusterSecret() { return RandomHex(32); }

// Compares in time independent of where the strings differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Server side: OK when `secret` is empty (no internal auth configured) or
// the call carries it; UNAUTHENTICATED otherwise, without saying more.
grpc::Status CheckClusterSecret(const grpc::ServerContext& ctx, const std::string& secret);

// Client side: an insecure channel to `target` whose every call carries
// `secret` (none when it is empty).
std::shared_ptr<grpc::Channel> InternalChannel(const std::string& target,
                                               const std::string& secret,
                                               const grpc::ChannelArguments& args = {});

}  // namespace specline
