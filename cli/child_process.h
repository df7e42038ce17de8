// Child processes of the launcher: spawn with a given argv, reap, restart.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace specline::cli {

// Starts argv[0] with argv. The child gets default signal handling and
// dies with the launcher (PR_SET_PDEATHSIG), so a crashed launcher leaves
// no orphaned workers behind. Throws std::runtime_error when fork fails.
pid_t SpawnProcess(const std::vector<std::string>& argv);

// Sends `sig`, waits up to `grace` for the exit, then SIGKILLs. Returns the
// wait status (or -1 when the process was already reaped).
int StopProcess(pid_t pid, int sig, std::chrono::milliseconds grace);

// Picks `n` distinct free TCP ports on 127.0.0.1, below the kernel's
// ephemeral range (so no outgoing connection takes one before its user
// binds it); the sockets stay open until all are chosen so none repeats.
std::vector<int> PickFreePorts(int n);

// The directory of the running executable (/proc/self/exe).
std::string ExecutableDir();

std::string DescribeExit(int wait_status);

}  // namespace specline::cli
