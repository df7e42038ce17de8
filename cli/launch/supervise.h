// Keeping a started child running: reap it when it exits and spawn it again
// with the same arguments after a backoff that grows while it keeps
// crashing. Shared by every supervised process of `specline serve` (the
// pipeline's processes and the router in front of replicas).
#pragma once

#include <chrono>

#include "cli/launch/startup.h"

namespace specline::launch {

// One child's restart schedule.
struct RestartState {
  Clock::time_point at;
  std::chrono::milliseconds backoff{250};
  bool waiting = false;  // exited; spawned again at `at`
};

// Reaps `c` when it has exited (and schedules its restart), or spawns it
// again when its restart is due. Returns true when it spawned it. Call from
// the thread that started `c` (children die with that thread,
// PR_SET_PDEATHSIG).
bool SuperviseChild(Child& c, RestartState& r);

}  // namespace specline::launch
