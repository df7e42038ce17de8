#include "transport/tcp_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <list>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
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
      : listen_fd_(listen_fd), wake_fd_(eventfd(0, EFD_CLOEXEC)), address_(std::move(address)) {
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~TcpReceiver() override { Shutdown(); }

  absl::StatusOr<std::string> Receive(std::chrono::milliseconds timeout) override {
    return queue_.Pop(timeout);
  }

  void Shutdown() override {
    if (stopping_.exchange(true)) return;
    queue_.Close();
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    accept_thread_.join();
    close(listen_fd_);
    close(wake_fd_);
    // Wake every reader blocked in recv; the peers see the connection close
    // and reconnect (to a restarted receiver) or fail.
    for (auto& c : conns_) shutdown(c->fd, SHUT_RDWR);
    for (auto& c : conns_) {
      c->thread.join();
      close(c->fd);
    }
    conns_.clear();
  }

  const std::string& address() const override { return address_; }
  size_t pending() const override { return queue_.size(); }

 private:
  struct Conn {
    int fd = -1;
    std::string peer;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  void AcceptLoop() {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    while (!stopping_.load()) {
      if (poll(fds, 2, -1) < 0) continue;  // EINTR
      if (fds[1].revents) break;
      if (!(fds[0].revents & POLLIN)) continue;
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
      if (fd < 0) continue;  // the peer went away between poll and accept
      SetNoDelay(fd);
      Reap();
      auto conn = std::make_unique<Conn>();
      conn->fd = fd;
      Conn* c = conn.get();
      c->thread = std::thread([this, c] { ReadLoop(c); });
      conns_.push_back(std::move(conn));
    }
  }

  // Joins readers whose connection ended, so a long-lived stage does not
  // accumulate threads across sender restarts.
  void Reap() {
    for (auto it = conns_.begin(); it != conns_.end();) {
      if ((*it)->done.load()) {
        (*it)->thread.join();
        close((*it)->fd);
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void ReadLoop(Conn* c) {
    unsigned char header[kFrameHeaderBytes];
    while (true) {
      absl::Status st = ReadExact(c->fd, header, sizeof(header));
      if (!st.ok()) break;  // closed: the sender reconnects if it needs to
      absl::StatusOr<uint32_t> length = DecodeFrameHeader(header);
      if (!length.ok()) {
        // Not our protocol (or corrupted): drop the connection, keep serving.
        spdlog::warn("transport {}: dropping connection: {}", address_,
                     std::string(length.status().message()));
        break;
      }
      std::string body(*length, '\0');
      if (!ReadExact(c->fd, body.data(), body.size()).ok()) break;
      if (!queue_.Push(std::move(body))) break;
    }
    // Close our side now (the fd itself is closed by Reap or Shutdown, so
    // its number cannot be reused while Shutdown may still touch it).
    shutdown(c->fd, SHUT_RDWR);
    c->done.store(true);
  }

  int listen_fd_;
  int wake_fd_;
  std::string address_;
  MessageQueue queue_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::list<std::unique_ptr<Conn>> conns_;  // accept thread only, then Shutdown
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
