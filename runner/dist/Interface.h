// Purpose: which network interface Gloo binds to, as NCCL chooses its own: the one the kernel's
// route to MASTER_ADDR leaves by (a UDP socket connected to the master — no packet is sent —
// tells the local address; the interface holding that address names it). An explicit choice wins:
// the spec's `distributed.interface`, then GLOO_SOCKET_IFNAME; a loopback MASTER_ADDR means every
// process is on this host (127.0.0.1). PyTorch instead binds to the address the host name resolves
// to, a loopback address on Debian's defaults, which no other host can reach. Torch-free.
#pragma once

#include <string>

#include "runner/dist/DistEnv.h"

namespace exprun {

struct NetInterface {
  std::string name;     // e.g. "eth0" ("" for a plain loopback address)
  std::string address;  // the local address Gloo binds to, e.g. "10.233.0.2"
  std::string how;      // why this one: "route to MASTER_ADDR 10.233.0.1", "GLOO_SOCKET_IFNAME", ...
  std::string text() const;  // "veth1 10.233.0.2 (route to MASTER_ADDR 10.233.0.1)"
};

bool isLoopbackHost(const std::string& host);

// The interface whose address this host uses to reach `host`. Throws DistError naming the host
// when it cannot be resolved or no interface holds the local address.
NetInterface interfaceToward(const std::string& host);
// The interface named `name` (its first IPv4 address, else IPv6). Throws DistError listing the
// interfaces there are.
NetInterface interfaceNamed(const std::string& name);
// The choice described above; `configured` is distributed.interface ("" for none).
NetInterface chooseInterface(const std::string& configured, const std::string& masterAddr);

}  // namespace exprun
