// The accepting side shared by the socket transports (tcp://, nccl://): an
// accept thread on a listening socket and one thread per connection running
// the transport's handler. Shutdown semantics are the TCP receiver's
// (docs/transport.md): stop accepting, wake every handler blocked in recv by
// shutting its socket down, join everything.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <thread>

namespace specline::transport {

class ConnectionServer {
 public:
  // Serves one connection until it ends or the server stops; the server
  // owns the fd (it shuts it down when `serve` returns and closes it later).
  using Handler = std::function<void(int fd)>;

  // Takes ownership of `listen_fd` and starts accepting.
  ConnectionServer(int listen_fd, Handler serve);
  ~ConnectionServer();
  ConnectionServer(const ConnectionServer&) = delete;
  ConnectionServer& operator=(const ConnectionServer&) = delete;

  // Stops accepting, shuts every connection down (handlers blocked in recv
  // return), joins the accept and handler threads and closes every fd.
  // Idempotent; handlers blocked elsewhere must be woken by their owner
  // first (e.g. through a flag they poll).
  void Stop();

 private:
  struct Conn {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void AcceptLoop();
  void Reap();

  int listen_fd_;
  int wake_fd_;
  Handler serve_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::list<std::unique_ptr<Conn>> conns_;  // accept thread only, then Stop
};

}  // namespace specline::transport
