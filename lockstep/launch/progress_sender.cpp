#include "lockstep/launch/progress_sender.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "lockstep/launch/progress_channel.h"
#include "lockstep/util/error.h"

namespace lockstep::launch {

std::unique_ptr<ProgressSender> ProgressSender::fromEnvironment() {
  const char* a = std::getenv(kProgressSocketEnv);
  if (a == nullptr || *a == '\0') return nullptr;
  return std::make_unique<ProgressSender>(a);
}

ProgressSender::ProgressSender(const std::string& address) {
  sockaddr_un sa{};
  socklen_t len = progressSocketAddress(address, sa);
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  LOCKSTEP_ENFORCE(fd_ >= 0, IoError, "cannot create a socket for ", kProgressSocketEnv, ": ",
                   std::strerror(errno));
  // An agent that is gone or never listened just means nobody draws: sends then fail quietly.
  (void)::connect(fd_, reinterpret_cast<sockaddr*>(&sa), len);
}

ProgressSender::~ProgressSender() {
  if (fd_ >= 0) ::close(fd_);
}

void ProgressSender::send(const ProgressReport& r) {
  std::string s = encodeProgressReport(r);
  (void)::send(fd_, s.data(), s.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace lockstep::launch
