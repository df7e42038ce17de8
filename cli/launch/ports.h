// Ports for the processes of a local deployment, picked before they start
// (so a restarted process keeps its address).
#pragma once

#include <vector>

namespace specline::launch {

// The low end of the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range; 32768 when unreadable): where
// port-0 binds and outgoing connections take their ports.
int EphemeralPortLow();

// Picks `n` distinct free TCP ports on 127.0.0.1, below the kernel's
// ephemeral range (so no outgoing connection takes one before its user
// binds it); the sockets stay open until all are chosen so none repeats.
// Throws std::runtime_error when no free port can be found.
std::vector<int> PickFreePorts(int n);

}  // namespace specline::launch
