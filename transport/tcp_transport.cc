#include "transport/tcp_transport.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "transport/connection_server.h"
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
  TcpReceiver(int listen_fd, std::string address)
      : address_(std::move(address)),
        server_(listen_fd, [this](int fd) { ReadLoop(fd); }) {}
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
  void ReadLoop(int fd) {
    while (true) {
      std::string body;
      absl::Status st = ReadFrame(fd, &body);
      if (st.code() == absl::StatusCode::kInvalidArgument) {
        // Not our protocol (or corrupted): drop the connection, keep serving.
        spdlog::warn("transport {}: dropping connection: {}", address_,
                     std::string(st.message()));
        break;
      }
      if (!st.ok()) break;  // closed: the sender reconnects if it needs to
      if (!queue_.Push(std::move(body))) break;
    }
  }

  std::string address_;
  MessageQueue queue_;
  ConnectionServer server_;  // last: its threads use the members above
};

class TcpSender : public ActivationSender {
 public:
  TcpSender(std::string host, int port, int timeout_ms)
      : host_(std::move(host)), port_(port), timeout_ms_(timeout_ms),
        address_(TcpAddress(host_, port_)) {}
  ~TcpSender() override { Disconnect(); }

  absl::Status Send(std::string_view message) override {
    if (message.size() > kMaxFrameBytes) {
      return absl::InvalidArgumentError(absl::StrCat("message of ", message.size(),
                                                     " bytes exceeds the frame limit of ",
                                                     kMaxFrameBytes));
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
        fd_ = *fd;
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
  std::string address_;
  int fd_ = -1;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ActivationReceiver>> ListenTcp(const std::string& host, int port) {
  int bound = 0;
  absl::StatusOr<int> fd = ListenSocket(host, port, &bound);
  if (!fd.ok()) return fd.status();
  return std::make_unique<TcpReceiver>(*fd, TcpAddress(host, bound));
}

std::unique_ptr<ActivationSender> ConnectTcp(const std::string& host, int port,
                                             int connect_timeout_ms) {
  return std::make_unique<TcpSender>(host, port, connect_timeout_ms);
}

}  // namespace specline::transport
