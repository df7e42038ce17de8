// Serves Prometheus /metrics for one process (prometheus-cpp's civetweb
// Exposer), and stops at once. civetweb's mg_stop waits for its listener
// thread, which polls the listening socket in 2 s quanta, so every process
// used to hang about 2 s after "stopped"; the destructor wakes the poll with
// a connection instead.
#pragma once

#include <memory>
#include <string>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

namespace specline {

class MetricsServer {
 public:
  // Listens on host:port (port 0 picks one). Throws ListenError
  // (common/listen_error.h) when it cannot.
  MetricsServer(const std::string& host, int port);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  void Register(const std::shared_ptr<prometheus::Collectable>& collectable);
  int port() const { return port_; }

 private:
  std::string host_;
  int port_ = 0;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace specline
