#include "cli/child_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace specline::cli {

pid_t SpawnProcess(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // The launcher blocks SIGINT/SIGTERM to sigwait on them; a blocked mask
    // survives exec, so give the child its signals back.
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the launcher died before prctl
    // Its own process group: a Ctrl-C in the terminal reaches the launcher
    // only, which then shuts the children down in order.
    setpgid(0, 0);
    execv(cargv[0], cargv.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

int StopProcess(pid_t pid, int sig, std::chrono::milliseconds grace) {
  if (pid <= 0) return -1;
  if (kill(pid, sig) != 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return status;
}

namespace {

// The kernel's ephemeral range: where port-0 binds and outgoing connections
// take their ports. Ports picked for later use stay clear of it.
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return in >> low ? low : 32768;
}

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
  const int high = EphemeralLow();
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

std::string ExecutableDir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

std::string DescribeExit(int status) {
  if (status < 0) return "already reaped";
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

}  // namespace specline::cli
