#include "lockstep/comm/store/tcp_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "lockstep/util/error.h"

namespace lockstep::comm::detail {

int pollTimeoutMs(Clock::time_point deadline) {
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

namespace {

// Non-blocking connect bounded by deadline; returns fd or -1 with err set.
int tryConnect(const addrinfo* ai, Clock::time_point deadline, int& err) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) {
    err = errno;
    return -1;
  }
  int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, std::min(pollTimeoutMs(deadline), 1000));
    if (rc == 1) {
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
    } else {
      err = rc == 0 ? ETIMEDOUT : errno;
      rc = -1;
    }
  } else if (rc != 0) {
    err = errno;
  }
  if (rc != 0) {
    ::close(fd);
    return -1;
  }
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

int connectWithRetry(const std::string& host, uint16_t port, Clock::time_point deadline,
                     const std::string& what) {
  std::string last = "no attempt made";
  auto pause = std::chrono::milliseconds(10);
  std::string port_str = std::to_string(port);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int gai = ::getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res);
    if (gai != 0) {
      last = std::string("cannot resolve host: ") + ::gai_strerror(gai);
    } else {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        int err = 0;
        int fd = tryConnect(ai, deadline, err);
        if (fd >= 0) {
          ::freeaddrinfo(res);
          return fd;
        }
        last = std::strerror(err);
      }
      ::freeaddrinfo(res);
    }
    if (Clock::now() + pause >= deadline) break;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  throw TimeoutError(::lockstep::detail::concat(
      what, ": could not connect to ", host, ":", port, " before the timeout (last error: ", last,
      "); check that the server (rank 0 or the launcher) is running and that "
      "MASTER_ADDR/MASTER_PORT point to it"));
}

int listenOn(const std::string& host, uint16_t port, uint16_t* actual_port) {
  // Dual-stack IPv6 socket accepts IPv4 too; fall back to IPv4 where IPv6 is disabled.
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  LOCKSTEP_ENFORCE(fd >= 0, IoError, "TCPStore server: socket() failed: ", std::strerror(errno));
  int one = 1, zero = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (v6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(port);
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(port);
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  if (rc != 0 || ::listen(fd, 1024) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EADDRINUSE) {
      throw IoError(
          ::lockstep::detail::concat("TCPStore server cannot listen on ", host, ":", port,
                                     ": address already in use; another job or a leftover process holds "
                                     "this port: choose another MASTER_PORT (or port 0 for any free port) "
                                     "or stop the process that holds it"));
    }
    throw IoError(::lockstep::detail::concat("TCPStore server cannot listen on ", host, ":", port, ": ",
                                             std::strerror(err)));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *actual_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

void sendAll(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{fd, POLLOUT, 0};
      int rc = ::poll(&pfd, 1, pollTimeoutMs(deadline));
      if (rc == 0) throw TimeoutError(::lockstep::detail::concat(what, ": timed out sending"));
      continue;
    }
    throw PeerError(
        ::lockstep::detail::concat(what, ": connection lost while sending (", std::strerror(errno), ")"));
  }
}

void recvAll(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, pollTimeoutMs(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) throw TimeoutError(::lockstep::detail::concat(what, ": timed out waiting for a reply"));
    ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    throw PeerError(
        ::lockstep::detail::concat(what, ": connection closed by the peer",
                                   k < 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string()));
  }
}

}  // namespace lockstep::comm::detail
