#include "cli/launch/supervise.h"

#include <sys/wait.h>

#include <algorithm>

#include <spdlog/spdlog.h>

namespace specline::launch {

bool SuperviseChild(Child& c, RestartState& r) {
  if (r.waiting) {
    if (Clock::now() < r.at) return false;
    Spawn(c);
    r.waiting = false;
    spdlog::warn("serve: restarted {} (pid {})", c.spec.name, c.pid);
    return true;
  }
  int status = 0;
  if (c.pid <= 0 || waitpid(c.pid, &status, WNOHANG) != c.pid) return false;
  // A process that ran a while before crashing starts again quickly; one
  // that keeps crashing waits longer each time (up to 10 s).
  if (Clock::now() - c.started > std::chrono::seconds(30)) r.backoff = std::chrono::milliseconds(250);
  spdlog::error("serve: {} (pid {}) {}; restarting in {} ms with the same arguments", c.spec.name,
                c.pid, DescribeExit(status), r.backoff.count());
  c.pid = -1;
  r.waiting = true;
  r.at = Clock::now() + r.backoff;
  r.backoff = std::min(r.backoff * 2, std::chrono::milliseconds(10000));
  return false;
}

}  // namespace specline::launch
