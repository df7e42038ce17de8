// The accepting side shared by the socket transports (tcp://, nccl://): an
// accept thread on a listening socket and one thread per connection, which
// first runs the transport's handshake (data_plane_auth.h) and then, if the
// peer passed it, the transport's handler. Shutdown semantics are the TCP
// receiver's (docs/transport.md): stop accepting, wake every handshake and
// handler blocked in recv/poll by shutting its socket down, join everything.
//
// Bounds (a flood of connections must not pin threads or memory): at most
// `max_handshakes` connections in their handshake at once, and at most
// `max_connections` open at once; a connection over either limit is closed
// at accept, before any thread is started for it. Each handshake is bounded
// in time by the transport (TransportOptions::handshake_timeout_ms).
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <thread>

namespace specline::transport {

class ConnectionServer {
 public:
  // Runs on the connection's thread before `Handler`; true admits the
  // connection. The server owns the fd.
  using Handshake = std::function<bool(int fd)>;
  // Serves one admitted connection until it ends or the server stops; the
  // server owns the fd (it shuts it down when `serve` returns and closes it
  // later).
  using Handler = std::function<void(int fd)>;
  // Told why a connection was closed at accept (over a limit, no thread).
  using Refused = std::function<void(const std::string& why)>;

  struct Limits {
    int max_handshakes = 64;
    int max_connections = 1024;
  };

  // Takes ownership of `listen_fd` and starts accepting.
  ConnectionServer(int listen_fd, Handshake handshake, Handler serve, Limits limits,
                   Refused refused = nullptr);
  // No handshake, default limits.
  ConnectionServer(int listen_fd, Handler serve);
  ~ConnectionServer();
  ConnectionServer(const ConnectionServer&) = delete;
  ConnectionServer& operator=(const ConnectionServer&) = delete;

  // Stops accepting, shuts every connection down (handshakes and handlers
  // blocked in recv/poll return), joins the accept and connection threads
  // and closes every fd. Idempotent; handlers blocked elsewhere must be
  // woken by their owner first (e.g. through a flag they poll).
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
  Handshake handshake_;
  Handler serve_;
  Limits limits_;
  Refused refused_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> handshaking_{0};
  std::thread accept_thread_;
  std::list<std::unique_ptr<Conn>> conns_;  // accept thread only, then Stop
};

}  // namespace specline::transport
