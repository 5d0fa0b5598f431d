#pragma once
// A plain TCP connection to a store on this host, for the tests that speak to the server directly
// (bytes without a handshake, a slow or hostile client).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace lockstep::comm::testing {

/// A socket connected to 127.0.0.1:port, or -1 when the connection is refused.
inline int rawConnect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace lockstep::comm::testing
