// Purpose: Gloo's interface (runner/dist/Interface.h) on this host's loopback: the route to
// 127.0.0.1 leaves by lo, an interface by name, the order of the choices, and errors that name what
// is wrong (an unknown interface lists the ones there are; an unresolvable master is named).
#include "runner/dist/Interface.h"

#include <cstdlib>

#include "tests/TestUtil.h"

using namespace exprun;

TEST_SUITE("dist") {
  TEST_CASE("Gloo's interface: the route to the master, an explicit name, the variable, loopback") {
    const NetInterface route = interfaceToward("127.0.0.1");
    CHECK(route.name == "lo");
    CHECK(route.address == "127.0.0.1");
    CHECK(route.how == "route to MASTER_ADDR 127.0.0.1");
    CHECK(interfaceNamed("lo").address == "127.0.0.1");
    CHECK_THROWS_CONTAINING(DistError, interfaceNamed("nosuch0"), "no interface 'nosuch0'");
    CHECK_THROWS_CONTAINING(DistError, interfaceNamed("nosuch0"), "lo");  // the ones there are
    CHECK_THROWS_CONTAINING(DistError, interfaceToward("no-such-host.invalid"), "cannot resolve MASTER_ADDR");
    ::unsetenv("GLOO_SOCKET_IFNAME");
    CHECK(chooseInterface("", "127.0.0.1").text() == "127.0.0.1 (MASTER_ADDR 127.0.0.1 is this host)");
    CHECK(chooseInterface("lo", "10.233.0.1").text() == "lo 127.0.0.1 (distributed.interface)");
    ::setenv("GLOO_SOCKET_IFNAME", "lo", 1);
    CHECK(chooseInterface("", "10.233.0.1").how == "GLOO_SOCKET_IFNAME");
    CHECK_THROWS_AS(chooseInterface("nosuch0", "10.233.0.1"), DistError);  // the spec's choice wins
    ::unsetenv("GLOO_SOCKET_IFNAME");
  }
}
