#include "lockstep/launch/progress_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "lockstep/util/error.h"

namespace lockstep::launch {

// "@name" -> an abstract-namespace address (sun_path[0] == '\0').
socklen_t progressSocketAddress(const std::string& address, sockaddr_un& sa) {
  std::memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  std::string name = address.substr(address[0] == '@' ? 1 : 0);
  LOCKSTEP_ENFORCE(name.size() + 1 < sizeof sa.sun_path, ValueError, kProgressSocketEnv, "='", address,
                   "' is too long for a socket name");
  std::memcpy(sa.sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

void setProgressSocket(std::map<std::string, std::string>& env, int rank, const std::string& address) {
  if (rank == 0 && !address.empty()) {
    env[kProgressSocketEnv] = address;
  } else {
    env.erase(kProgressSocketEnv);
  }
}

ProgressChannel::ProgressChannel(Console& console) : console_(console) {
  std::random_device rd;
  address_ = "@lockstep-progress-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  LOCKSTEP_ENFORCE(fd_ >= 0, IoError, "cannot create the progress socket: ", std::strerror(errno));
  sockaddr_un sa{};
  socklen_t len = progressSocketAddress(address_, sa);
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&sa), len) != 0 || ::pipe2(wake_, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(fd_);
    throw IoError("cannot bind the progress socket " + address_ + ": " + std::strerror(e));
  }
  thread_ = std::thread([this] { loop(); });
}

ProgressChannel::~ProgressChannel() {
  char c = 0;
  ssize_t r = ::write(wake_[1], &c, 1);
  (void)r;
  thread_.join();
  for (int fd : {fd_, wake_[0], wake_[1]}) ::close(fd);
}

void ProgressChannel::loop() {
  char buf[1024];
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    // Only the newest report matters: read all that are queued, draw the last.
    std::optional<ProgressReport> newest;
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof buf - 1, 0);
      if (n < 0) break;
      if (auto r = decodeProgressReport(std::string(buf, static_cast<size_t>(n)))) newest = r;
    }
    if (newest) console_.setProgress(*newest);
  }
}

}  // namespace lockstep::launch
