#include "cli/launch/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

namespace specline::launch {

// Ports picked for later use stay clear of the ephemeral range.
int EphemeralPortLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return in >> low ? low : 32768;
}

namespace {

// Binds 127.0.0.1:port (0 = any); returns the fd and sets *bound, or -1.
int BindLoopback(int port, int* bound) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return -1;
  }
  *bound = ntohs(addr.sin_port);
  return fd;
}

}  // namespace

std::vector<int> PickFreePorts(int n) {
  // A port picked here is bound by a child a moment later. Picked from the
  // ephemeral range, it could meanwhile become the source port of any
  // outgoing connection on the machine (the CI flake this replaced); below
  // that range only another process choosing the same way can take it, and
  // the launcher retries with fresh ports when a child cannot bind.
  const int high = EphemeralPortLow();
  const int low = std::max(1024, high - 16384);
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> pick(low, std::max(low, high - 1));
  std::vector<int> fds, ports;
  for (int tries = 0; static_cast<int>(ports.size()) < n; ++tries) {
    int bound = 0;
    const int fd = BindLoopback(tries < 64 * n ? pick(rng) : 0, &bound);
    if (fd < 0) {
      if (tries >= 64 * n) {
        for (int f : fds) close(f);
        throw std::runtime_error(std::string("cannot pick a free port: ") + std::strerror(errno));
      }
      continue;
    }
    fds.push_back(fd);  // held until all are chosen, so none repeats
    ports.push_back(bound);
  }
  for (int fd : fds) close(fd);
  return ports;
}

}  // namespace specline::launch
