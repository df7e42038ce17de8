#include "cli/launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

namespace specline::launch {

pid_t SpawnProcess(const std::vector<std::string>& argv, const SpawnOptions& options) {
  if (argv.empty()) throw std::invalid_argument("SpawnProcess: empty argv");
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls (the parent may have threads).
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const char* log = options.log_path.empty() ? nullptr : options.log_path.c_str();
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // A launcher blocks SIGINT/SIGTERM to sigwait on them; a blocked mask
    // survives exec, so give the child its signals back.
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl
    if (options.own_process_group) setpgid(0, 0);
    if (log) {
      const int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
      }
    }
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

std::string ExecutableDir() {
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
}

std::string DescribeExit(int status) {
  if (status < 0) return "already reaped";
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

}  // namespace specline::launch
