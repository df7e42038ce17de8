#include "transport/connection_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/tcp_socket.h"

namespace specline::transport {

ConnectionServer::ConnectionServer(int listen_fd, Handler serve)
    : listen_fd_(listen_fd), wake_fd_(eventfd(0, EFD_CLOEXEC)), serve_(std::move(serve)) {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

ConnectionServer::~ConnectionServer() { Stop(); }

void ConnectionServer::Stop() {
  if (stopping_.exchange(true)) return;
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  accept_thread_.join();
  close(listen_fd_);
  close(wake_fd_);
  // Wake every handler blocked in recv; the peers see the connection close
  // and reconnect (to a restarted receiver) or fail.
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
    SetNoDelay(fd);
    Reap();
    auto conn = std::make_unique<Conn>();
    conn->fd = fd;
    Conn* c = conn.get();
    c->thread = std::thread([this, c] {
      serve_(c->fd);
      // Close our side now (the fd itself is closed by Reap or Stop, so its
      // number cannot be reused while Stop may still touch it).
      shutdown(c->fd, SHUT_RDWR);
      c->done.store(true);
    });
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
