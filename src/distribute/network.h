// The process group's socket helpers (private to src/distribute): this
// host's address towards another, an interface's address, and the probe
// sockets that tell whether a peer's network answers. POSIX only, no
// LibTorch.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace garden::distribute::detail {

// This host's address on the route to `host`; "" when there is no route.
std::string local_address_towards(const std::string& host, int port);
// The first IPv4 address (else IPv6) of interface `name`; "" when none.
std::string interface_address(const std::string& name);
// `host` as a numeric address; "" when it does not resolve.
std::string numeric_address(const std::string& host);
// A socket listening on every address of this host at a port of the
// kernel's choice (written to *port); -1 when it cannot be made.
int listen_for_probes(int* port);
// Opens a connection to every (address, port) at once and says, for each,
// whether it opened within `limit`.
std::vector<bool> connects_within(const std::vector<std::pair<std::string, int>>& targets,
                                  std::chrono::milliseconds limit);

}  // namespace garden::distribute::detail
