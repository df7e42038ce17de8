#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "common/listen_error.h"

namespace specline {
namespace {

// One connection to the listener, closed at once: enough to end its poll.
void Poke(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  const int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return;
  if (v6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    a.sin6_addr = in6addr_loopback;
    connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    // A wildcard listener is reached on loopback; otherwise its own address.
    if (host == "0.0.0.0" || inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  close(fd);
}

std::string Unbracket(const std::string& host) {
  return host.size() > 1 && host.front() == '[' ? host.substr(1, host.size() - 2) : host;
}

}  // namespace

MetricsServer::MetricsServer(const std::string& host, int port)
    : host_(Unbracket(host)),
      exposer_(std::make_unique<prometheus::Exposer>(host + ":" + std::to_string(port))) {
  const std::vector<int> ports = exposer_->GetListeningPorts();
  if (ports.empty()) {
    throw ListenError("metrics: cannot listen on " + host + ":" + std::to_string(port));
  }
  port_ = ports.front();
}

MetricsServer::~MetricsServer() {
  std::atomic<bool> stopped{false};
  std::thread waker([&] {
    while (!stopped.load()) {
      Poke(host_, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  exposer_.reset();
  stopped = true;
  waker.join();
}

void MetricsServer::Register(const std::shared_ptr<prometheus::Collectable>& collectable) {
  exposer_->RegisterCollectable(collectable);
}

}  // namespace specline
