// Child processes for multi-process tests: start a binary, wait for the
// port file it writes once it is serving, signal it, reap it. Children die
// with the test process (PR_SET_PDEATHSIG), so a crashed test leaks none.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace specline::testing {

// Starts argv[0] (a path) with argv[1..] (launch::SpawnProcess, in the
// test's process group). stdout and stderr go to `log_path` when given
// (appended), else to the test's own. Throws std::runtime_error when fork
// fails; an exec failure shows as exit 127.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_path = "");

// Polls for `path` until it holds a complete JSON object. Throws
// std::runtime_error after `timeout`, or as soon as `pid` (when > 0) has
// exited, quoting `log_path` (when given) so the failure says why.
nlohmann::json WaitForPortFile(const std::string& path, std::chrono::milliseconds timeout,
                               pid_t pid = 0, const std::string& log_path = "");

// kill(pid, signal); false when the process is already gone.
bool Kill(pid_t pid, int signal);

// Waits for `pid` to exit. Returns its exit code, 128 + N when killed by
// signal N, or -1 when it was still running after `timeout`.
int Wait(pid_t pid, std::chrono::milliseconds timeout);

// Owns a child: SIGKILLs and reaps it on destruction unless waited for.
class ChildProcess {
 public:
  ChildProcess() = default;
  explicit ChildProcess(const std::vector<std::string>& argv, const std::string& log_path = "");
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  nlohmann::json WaitForPortFile(const std::string& path, std::chrono::milliseconds timeout);
  bool Kill(int signal) { return specline::testing::Kill(pid_, signal); }
  // As testing::Wait; the child counts as reaped once it returned >= 0.
  int Wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

}  // namespace specline::testing
