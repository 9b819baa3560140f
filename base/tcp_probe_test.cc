#include "base/tcp_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace chunkzero {
namespace {

TEST(AcceptsTcpOnLoopback, TellsAListeningPortFromAClosedOne) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  // Bound but not listening: refused.
  EXPECT_FALSE(AcceptsTcpOnLoopback(port));
  ASSERT_EQ(listen(fd, 4), 0);
  EXPECT_TRUE(AcceptsTcpOnLoopback(port));
  close(fd);
  EXPECT_FALSE(AcceptsTcpOnLoopback(port));
  EXPECT_FALSE(AcceptsTcpOnLoopback(0));
  EXPECT_FALSE(AcceptsTcpOnLoopback(70000));
}

}  // namespace
}  // namespace chunkzero
