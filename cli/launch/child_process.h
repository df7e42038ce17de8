// Child processes of a launcher: spawn with a given argv, stop, describe
// how one ended.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace specline::launch {

struct SpawnOptions {
  // The child's stdout and stderr are appended to this file; "" = the
  // parent's own.
  std::string log_path;
  // Its own process group: a Ctrl-C in the terminal reaches the launcher
  // only, which then shuts the children down in order.
  bool own_process_group = true;
};

// Starts argv[0] (a path) with argv. The child gets every signal unblocked
// and dies with the parent (PR_SET_PDEATHSIG), so a crashed launcher leaves
// no orphaned workers behind; an exec failure shows as exit 127. Throws
// std::invalid_argument on an empty argv, std::runtime_error when fork fails.
pid_t SpawnProcess(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// Sends `sig`, waits up to `grace` for the exit, then SIGKILLs. Returns the
// wait status (or -1 when the process was already reaped).
int StopProcess(pid_t pid, int sig, std::chrono::milliseconds grace);

// The directory of the running executable (/proc/self/exe).
std::string ExecutableDir();

// "exited with code N", "killed by signal NAME", ... for a wait status.
std::string DescribeExit(int wait_status);

}  // namespace specline::launch
