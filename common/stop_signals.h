// Shutdown signals for the service binaries. SIGTERM and SIGINT are blocked
// before any thread starts, so every thread inherits the mask and only an
// explicit sigwait sees them: shutdown then runs on an ordinary thread, never
// inside a signal handler.
#pragma once

#include <signal.h>

namespace specline {

// Blocks SIGTERM and SIGINT in the calling thread (call first in main) and
// returns the set for sigwait.
sigset_t BlockStopSignals();

}  // namespace specline
