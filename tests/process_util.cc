#include "tests/process_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "cli/launch/child_process.h"

namespace specline::testing {
namespace {

std::string Tail(const std::string& path, size_t max_bytes = 4000) {
  if (path.empty()) return "";
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > max_bytes) s = "..." + s.substr(s.size() - max_bytes);
  return "\n--- " + path + " ---\n" + s;
}

}  // namespace

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  // In the test's process group: a test runner that kills the group takes
  // the children along.
  return launch::SpawnProcess(argv, {.log_path = log_path, .own_process_group = false});
}

nlohmann::json WaitForPortFile(const std::string& path, std::chrono::milliseconds timeout,
                               pid_t pid, const std::string& log_path) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::ifstream in(path);
    if (in) {
      std::stringstream ss;
      ss << in.rdbuf();
      auto json = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
      if (!json.is_discarded() && json.is_object()) return json;
    }
    if (pid > 0) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        throw std::runtime_error("process " + std::to_string(pid) + " exited (status " +
                                 std::to_string(status) + ") before writing " + path +
                                 Tail(log_path));
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("no port file " + path + " after " +
                               std::to_string(timeout.count()) + " ms" + Tail(log_path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool Kill(pid_t pid, int signal) { return pid > 0 && kill(pid, signal) == 0; }

int Wait(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    }
    if (r < 0) return -1;  // not our child, or already reaped
    if (std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log_path)
    : pid_(Spawn(argv, log_path)), log_path_(log_path) {}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_), log_path_(std::move(other.log_path_)) {
  other.pid_ = -1;
}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    this->~ChildProcess();
    pid_ = other.pid_;
    log_path_ = std::move(other.log_path_);
    other.pid_ = -1;
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

nlohmann::json ChildProcess::WaitForPortFile(const std::string& path,
                                             std::chrono::milliseconds timeout) {
  return specline::testing::WaitForPortFile(path, timeout, pid_, log_path_);
}

int ChildProcess::Wait(std::chrono::milliseconds timeout) {
  int code = specline::testing::Wait(pid_, timeout);
  if (code >= 0) pid_ = -1;
  return code;
}

}  // namespace specline::testing
