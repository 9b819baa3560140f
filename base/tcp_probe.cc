#include "base/tcp_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace chunkzero {

bool AcceptsTcpOnLoopback(int port) {
  if (port < 1 || port > 65535) return false;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&address),
                          sizeof(address)) == 0;
  close(fd);
  return ok;
}

}  // namespace chunkzero
