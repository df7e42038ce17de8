#include "transport/tcp_transport.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "transport/connection_server.h"
#include "transport/data_plane_auth.h"
#include "transport/message_queue.h"
#include "transport/tcp_socket.h"

namespace specline::transport {
namespace {

std::string TcpAddress(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return absl::StrCat("tcp://", v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
}

class TcpReceiver : public ActivationReceiver {
 public:
  TcpReceiver(int listen_fd, std::string address, const TransportOptions& options)
      : address_(std::move(address)), options_(options), drops_(address_),
        server_(
            listen_fd, [this](int fd) { return Handshake(fd); }, [this](int fd) { ReadLoop(fd); },
            {options.max_handshakes, options.max_connections},
            [this](const std::string& why) { drops_.Warn(why); }) {}
  ~TcpReceiver() override { Shutdown(); }

  absl::StatusOr<std::string> Receive(std::chrono::milliseconds timeout) override {
    return queue_.Pop(timeout);
  }

  void Shutdown() override {
    queue_.Close();
    server_.Stop();
  }

  const std::string& address() const override { return address_; }
  size_t pending() const override { return queue_.size(); }

 private:
  // The greeting and, with a secret, the challenge-response: bounded in
  // time and size (data_plane_auth.h). Nothing of the peer's reaches the
  // inbox before it returns true.
  bool Handshake(int fd) {
    absl::Status st = AcceptHandshake(fd, WireProtocol::kTcp, options_);
    if (st.ok()) return true;
    drops_.Warn(absl::StrCat("from ", PeerName(fd), ": ", st.message()));
    return false;
  }

  void ReadLoop(int fd) {
    while (true) {
      std::string body;
      absl::Status st = ReadFrame(fd, &body, kFrameMagic, options_.max_frame_bytes);
      if (st.code() == absl::StatusCode::kInvalidArgument) {
        // Not our protocol, corrupted, or a frame above our limit: drop the
        // connection, keep serving.
        drops_.Warn(absl::StrCat("from ", PeerName(fd), ": ", st.message()));
        break;
      }
      if (!st.ok()) break;  // closed: the sender reconnects if it needs to
      if (!queue_.Push(std::move(body))) break;
    }
  }

  std::string address_;
  TransportOptions options_;
  DropLog drops_;
  MessageQueue queue_;
  ConnectionServer server_;  // last: its threads use the members above
};

class TcpSender : public ActivationSender {
 public:
  TcpSender(std::string host, int port, int timeout_ms, const TransportOptions& options)
      : host_(std::move(host)), port_(port), timeout_ms_(timeout_ms), options_(options),
        address_(TcpAddress(host_, port_)) {}
  ~TcpSender() override { Disconnect(); }

  absl::Status Send(std::string_view message) override {
    if (message.size() > options_.max_frame_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("message of ", message.size(),
                                                     " bytes exceeds the frame limit of ",
                                                     options_.max_frame_bytes));
    }
    std::string why;
    for (int attempt = 0; attempt < 2; ++attempt) {
      // A peer that restarted closed our old connection: notice before
      // writing, or the first frame would vanish into the dead socket.
      if (fd_ >= 0 && PeerClosed(fd_)) Disconnect();
      if (fd_ < 0) {
        absl::StatusOr<int> fd = ConnectSocket(host_, port_, timeout_ms_);
        if (!fd.ok()) {
          return absl::UnavailableError(
              absl::StrCat("cannot reach ", address_, ": ", fd.status().message()));
        }
        // The receiver's greeting (and, with a secret, the proofs) before
        // any frame: a mismatch fails here, naming the cause.
        absl::StatusOr<size_t> limit =
            ConnectHandshake(*fd, WireProtocol::kTcp, options_, address_);
        if (!limit.ok()) {
          close(*fd);
          return limit.status();
        }
        fd_ = *fd;
        peer_limit_ = *limit;
      }
      if (message.size() > peer_limit_) {
        // Refused here rather than by the receiver, which would drop the
        // connection and the message with it.
        return absl::InvalidArgumentError(absl::StrCat("message of ", message.size(),
                                                       " bytes exceeds the frame limit of ",
                                                       peer_limit_, " that ", address_,
                                                       " announced"));
      }
      absl::Status st = WriteFrame(fd_, message.data(), message.size());
      if (st.ok()) return st;
      why = std::string(st.message());
      Disconnect();
    }
    return absl::UnavailableError(absl::StrCat("sending to ", address_, " failed: ", why));
  }

  const std::string& address() const override { return address_; }

 private:
  void Disconnect() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  std::string host_;
  int port_;
  int timeout_ms_;
  TransportOptions options_;
  std::string address_;
  int fd_ = -1;
  size_t peer_limit_ = kMaxFrameBytes;  // from the receiver's greeting
};

}  // namespace

absl::StatusOr<std::unique_ptr<ActivationReceiver>> ListenTcp(const std::string& host, int port,
                                                              const TransportOptions& options) {
  if (absl::Status st = CheckTransportOptions(options); !st.ok()) return st;
  int bound = 0;
  absl::StatusOr<int> fd = ListenSocket(host, port, &bound);
  if (!fd.ok()) return fd.status();
  return std::make_unique<TcpReceiver>(*fd, TcpAddress(host, bound), options);
}

std::unique_ptr<ActivationSender> ConnectTcp(const std::string& host, int port,
                                             int connect_timeout_ms,
                                             const TransportOptions& options) {
  return std::make_unique<TcpSender>(host, port, connect_timeout_ms, options);
}

}  // namespace specline::transport
