#include "transport/connection_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <system_error>

#include "absl/strings/str_cat.h"
#include "transport/tcp_socket.h"

namespace specline::transport {

ConnectionServer::ConnectionServer(int listen_fd, Handshake handshake, Handler serve,
                                   Limits limits, Refused refused)
    : listen_fd_(listen_fd), wake_fd_(eventfd(0, EFD_CLOEXEC)), handshake_(std::move(handshake)),
      serve_(std::move(serve)), limits_(limits), refused_(std::move(refused)) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

ConnectionServer::ConnectionServer(int listen_fd, Handler serve)
    : ConnectionServer(listen_fd, nullptr, std::move(serve), Limits{}) {}

ConnectionServer::~ConnectionServer() { Stop(); }

void ConnectionServer::Stop() {
  if (stopping_.exchange(true)) return;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  accept_thread_.join();
  close(listen_fd_);
  close(wake_fd_);
  // Wake every handshake and handler blocked in recv/poll; the peers see
  // the connection close and reconnect (to a restarted receiver) or fail.
  for (auto& c : conns_) shutdown(c->fd, SHUT_RDWR);
  for (auto& c : conns_) {
    c->thread.join();
    close(c->fd);
  }
  conns_.clear();
}

void ConnectionServer::AcceptLoop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (!stopping_.load()) {
    if (poll(fds, 2, -1) < 0) continue;  // EINTR
    if (fds[1].revents) break;
    if (!(fds[0].revents & POLLIN)) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the peer went away between poll and accept
    Reap();
    // Over a limit: closed before any thread or buffer exists for it. The
    // sender sees the connection close before the greeting (UNAVAILABLE).
    std::string over;
    if (static_cast<int>(conns_.size()) >= limits_.max_connections) {
      over = absl::StrCat("already ", conns_.size(), " open connections (the limit)");
    } else if (handshaking_.load() >= limits_.max_handshakes) {
      over = absl::StrCat("already ", handshaking_.load(),
                          " connections in their handshake (the limit)");
    }
    if (!over.empty()) {
      close(fd);
      if (refused_) refused_(over);
      continue;
    }
    SetNoDelay(fd);
    auto conn = std::make_unique<Conn>();
    conn->fd = fd;
    Conn* c = conn.get();
    handshaking_.fetch_add(1);
    try {
      c->thread = std::thread([this, c] {
        bool admitted = true;
        if (handshake_) admitted = handshake_(c->fd);
        handshaking_.fetch_sub(1);
        if (admitted) serve_(c->fd);
        // Close our side now (the fd itself is closed by Reap or Stop, so its
        // number cannot be reused while Stop may still touch it).
        shutdown(c->fd, SHUT_RDWR);
        c->done.store(true);
      });
    } catch (const std::system_error& e) {
      // Out of threads: refuse this connection, keep serving the others.
      handshaking_.fetch_sub(1);
      close(fd);
      if (refused_) refused_(absl::StrCat("cannot start a connection thread: ", e.what()));
      continue;
    }
    conns_.push_back(std::move(conn));
  }
}

// Joins handlers whose connection ended, so a long-lived stage does not
// accumulate threads across sender restarts.
void ConnectionServer::Reap() {
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

}  // namespace specline::transport
