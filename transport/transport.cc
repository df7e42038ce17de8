#include "transport/transport.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "transport/data_plane_auth.h"
#include "transport/inproc_transport.h"
#include "transport/tcp_transport.h"
#ifdef SPECLINE_HAVE_NCCL
#include "transport/nccl_transport.h"
#endif

namespace specline::transport {

absl::StatusOr<Address> ParseAddress(const std::string& address) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad transport address \"", address, "\": ", why,
        " (expected tcp://HOST:PORT, nccl://HOST:PORT or inproc://NAME)"));
  };
  Address out;
  if (address.rfind("inproc://", 0) == 0) {
    out.scheme = "inproc";
    out.name = address.substr(9);
    if (out.name.empty()) return bad("empty inproc name");
    return out;
  }
  if (address.rfind("tcp://", 0) == 0) {
    out.scheme = "tcp";
  } else if (address.rfind("nccl://", 0) == 0) {
    out.scheme = "nccl";
  } else {
    return bad("unknown scheme");
  }
  const std::string rest = address.substr(out.scheme.size() + 3);
  size_t colon;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return bad("unterminated [IPv6] host");
    }
    out.host = rest.substr(1, close - 1);
    colon = close + 1;
  } else {
    colon = rest.rfind(':');
    if (colon == std::string::npos) return bad("missing :PORT");
    out.host = rest.substr(0, colon);
  }
  if (out.host.empty()) return bad("empty host");
  const std::string port = rest.substr(colon + 1);
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), out.port);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || out.port < 0 ||
      out.port > 65535) {
    return bad("port must be a number in [0, 65535]");
  }
  return out;
}

#ifndef SPECLINE_HAVE_NCCL
namespace {

absl::Status NoNccl(const std::string& address) {
  return absl::UnimplementedError(absl::StrCat(
      "cannot use \"", address, "\": specline was built without NCCL (nccl:// needs the CUDA "
      "toolkit's NCCL at build time; tcp:// works everywhere)"));
}

}  // namespace
#endif

absl::StatusOr<std::unique_ptr<ActivationReceiver>> Listen(const std::string& address,
                                                           const TransportOptions& options) {
  absl::StatusOr<Address> a = ParseAddress(address);
  if (!a.ok()) return a.status();
  if (absl::Status st = CheckTransportOptions(options); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot listen on ", address, ": ", st.message()));
  }
  // In-process inboxes need no authentication (one address space) and
  // allocate nothing on anyone's claim.
  if (a->scheme == "inproc") return ListenInproc(a->name);
  if (a->scheme == "nccl") {
#ifdef SPECLINE_HAVE_NCCL
    absl::StatusOr<std::unique_ptr<NcclReceiver>> r =
        ListenNccl(a->host, a->port, NcclOptions{}, options);
    if (!r.ok()) return r.status();
    return std::unique_ptr<ActivationReceiver>(std::move(*r));
#else
    return NoNccl(address);
#endif
  }
  return ListenTcp(a->host, a->port, options);
}

absl::StatusOr<std::unique_ptr<ActivationReceiver>> Listen(const std::string& address) {
  return Listen(address, TransportOptions{});
}

absl::StatusOr<std::unique_ptr<ActivationSender>> Connect(const std::string& address,
                                                          const TransportOptions& options) {
  absl::StatusOr<Address> a = ParseAddress(address);
  if (!a.ok()) return a.status();
  if (absl::Status st = CheckTransportOptions(options); !st.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot connect to ", address, ": ", st.message()));
  }
  if (a->scheme == "inproc") return ConnectInproc(a->name);
  if (a->port == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot connect to \"", address, "\": port 0 is only for Listen"));
  }
  if (a->scheme == "nccl") {
#ifdef SPECLINE_HAVE_NCCL
    absl::StatusOr<std::unique_ptr<NcclSender>> s =
        ConnectNccl(a->host, a->port, NcclOptions{}, options);
    if (!s.ok()) return s.status();
    return std::unique_ptr<ActivationSender>(std::move(*s));
#else
    return NoNccl(address);
#endif
  }
  return ConnectTcp(a->host, a->port, /*connect_timeout_ms=*/5000, options);
}

absl::StatusOr<std::unique_ptr<ActivationSender>> Connect(const std::string& address) {
  return Connect(address, TransportOptions{});
}

}  // namespace specline::transport
