// The address rule (see Note [Choosing the host address]) on this host's own
// interfaces. Across hosts it is tested with separate network namespaces
// (tests/multihost).
#include "common/host_address.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace tessera {
namespace {

TEST(HostAddressTest, LoopbackMasterMeansLoopback) {
  auto chosen = ChooseHostAddress("127.0.0.1", {});
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->bind, "127.0.0.1");
  EXPECT_EQ(chosen->advertise, "127.0.0.1");
  EXPECT_EQ(chosen->interface, "lo");
  EXPECT_TRUE(absl::StrContains(chosen->reason, "is loopback")) << chosen->reason;
}

TEST(HostAddressTest, HostNamesAndIpv6Resolve) {
  auto by_name = ChooseHostAddress("localhost", {});
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ(by_name->advertise, "127.0.0.1");
  auto v6 = ChooseHostAddress("[::1]", {});
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->advertise, "::1");
  EXPECT_EQ(JoinHostPort(v6->advertise, 80), "[::1]:80");
}

TEST(HostAddressTest, AnInterfaceGivesItsAddressOfTheMastersFamily) {
  AddressOptions options;
  options.interface = "lo";
  auto v4 = ChooseHostAddress("127.0.0.1", options);
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->advertise, "127.0.0.1");
  auto v6 = ChooseHostAddress("::1", options);
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->advertise, "::1");
}

TEST(HostAddressTest, AMissingInterfaceIsNamedWithItsSetting) {
  AddressOptions options;
  options.interface = "tessera-no-such0";
  options.interface_source = "GLOO_SOCKET_IFNAME";
  auto chosen = ChooseHostAddress("127.0.0.1", options);
  ASSERT_FALSE(chosen.ok());
  EXPECT_TRUE(absl::StrContains(chosen.status().message(),
                                "interface 'tessera-no-such0' (GLOO_SOCKET_IFNAME) does not "
                                "exist on this host; this host has: lo 127.0.0.1"))
      << chosen.status();
}

TEST(HostAddressTest, AWildcardListensEverywhereAndAdvertisesTheRoute) {
  AddressOptions options;
  options.address = "0.0.0.0";
  options.advertise = "127.0.0.2";
  auto chosen = ChooseHostAddress("127.0.0.1", options);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ(chosen->bind, "0.0.0.0");
  EXPECT_EQ(chosen->advertise, "127.0.0.2");
  EXPECT_TRUE(absl::StrContains(chosen->Describe(), "listening on 0.0.0.0")) << chosen->Describe();
}

TEST(HostAddressTest, AnUnresolvableMasterIsNamed) {
  auto chosen = ChooseHostAddress("tessera-no-such-host.invalid", {});
  ASSERT_FALSE(chosen.ok());
  EXPECT_TRUE(absl::StrContains(chosen.status().message(),
                                "cannot resolve MASTER_ADDR 'tessera-no-such-host.invalid'"))
      << chosen.status();
}

TEST(HostAddressTest, HostPortRoundTrips) {
  std::string host;
  int port = 0;
  ASSERT_TRUE(SplitHostPort("[fd00::2]:29500", &host, &port));
  EXPECT_EQ(host, "fd00::2");
  EXPECT_EQ(port, 29500);
  ASSERT_TRUE(SplitHostPort("10.0.0.1:7", &host, &port));
  EXPECT_EQ(host, "10.0.0.1");
  EXPECT_FALSE(SplitHostPort("nohost", &host, &port));
  EXPECT_TRUE(IsWildcardAddress("::"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1"));
}

}  // namespace
}  // namespace tessera
