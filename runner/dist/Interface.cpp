// Purpose: Gloo's interface from the route to the master (see Interface.h).
#include "runner/dist/Interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace exprun {
namespace {

std::string addressText(const sockaddr* a) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, buf, sizeof buf);
  else if (a->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, buf, sizeof buf);
  return buf;
}

struct Address {
  std::string name, address;
  int family;
};

std::vector<Address> interfaceAddresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw DistError(std::string("gloo interface: getifaddrs failed: ") + std::strerror(errno));
  std::vector<Address> out;
  for (ifaddrs* i = list; i; i = i->ifa_next)
    if (i->ifa_addr && (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6) &&
        (i->ifa_flags & IFF_UP))
      out.push_back({i->ifa_name, addressText(i->ifa_addr), i->ifa_addr->sa_family});
  ::freeifaddrs(list);
  return out;
}

std::string names(const std::vector<Address>& all) {
  std::string s;
  for (const auto& a : all)
    if (s.find(a.name) == std::string::npos) s += (s.empty() ? "" : ", ") + a.name;
  return s.empty() ? "none" : s;
}

}  // namespace

std::string NetInterface::text() const {
  return (name.empty() ? address : name + " " + address) + " (" + how + ")";
}

bool isLoopbackHost(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

NetInterface interfaceToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0)
    throw DistError("gloo interface: cannot resolve MASTER_ADDR " + host + ": " + ::gai_strerror(rc));
  std::string local, error = "no address";
  for (addrinfo* a = found; a && local.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage me{};
    socklen_t len = sizeof me;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0)
      local = addressText(reinterpret_cast<sockaddr*>(&me));
    else
      error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (local.empty()) throw DistError("gloo interface: no route to MASTER_ADDR " + host + " (" + error + ")");
  const auto all = interfaceAddresses();
  for (const auto& a : all)
    if (a.address == local) return {a.name, a.address, "route to MASTER_ADDR " + host};
  throw DistError("gloo interface: the route to MASTER_ADDR " + host + " leaves from " + local +
                  ", which no interface holds (interfaces: " + names(all) + "); set distributed.interface");
}

NetInterface interfaceNamed(const std::string& name) {
  const auto all = interfaceAddresses();
  for (int family : {AF_INET, AF_INET6})
    for (const auto& a : all)
      if (a.name == name && a.family == family) return {a.name, a.address, ""};
  throw DistError("gloo interface: no interface '" + name + "' with an address that is up (interfaces: " + names(all) +
                  ")");
}

NetInterface chooseInterface(const std::string& configured, const std::string& masterAddr) {
  if (!configured.empty()) {
    NetInterface n = interfaceNamed(configured);
    n.how = "distributed.interface";
    return n;
  }
  if (const char* env = std::getenv("GLOO_SOCKET_IFNAME"); env && *env) {
    NetInterface n = interfaceNamed(env);
    n.how = "GLOO_SOCKET_IFNAME";
    return n;
  }
  if (isLoopbackHost(masterAddr)) return {"", "127.0.0.1", "MASTER_ADDR " + masterAddr + " is this host"};
  return interfaceToward(masterAddr);
}

}  // namespace exprun
