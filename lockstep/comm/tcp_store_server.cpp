#include "lockstep/comm/tcp_store_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "lockstep/comm/store.h"
#include "lockstep/comm/tcp_socket.h"
#include "lockstep/comm/tcp_store_protocol.h"
#include "lockstep/comm/tcp_store_request.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

using detail::FrameSplit;
using detail::FrameWriter;
using detail::StoreCmd;
using detail::StoreStatus;

TCPStoreServer::TCPStoreServer(const std::string& host, uint16_t port) : host_(host) {
  listen_fd_ = detail::listenOn(host, port, &port_);
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    throw IoError(::lockstep::detail::concat("TCPStore server: pipe() failed: ", std::strerror(errno)));
  }
  ::fcntl(listen_fd_, F_SETFL, ::fcntl(listen_fd_, F_GETFL) | O_NONBLOCK);
  thread_ = std::thread([this] { run(); });
}

TCPStoreServer::~TCPStoreServer() {
  char c = 'q';
  [[maybe_unused]] ssize_t n = ::write(wake_pipe_[1], &c, 1);
  thread_.join();
  for (auto& [fd, c2] : clients_) ::close(fd);
  ::close(listen_fd_);
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
}

void TCPStoreServer::run() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [fd, c] : clients_) {
      short ev = POLLIN;
      if (c.out_pos < c.out.size()) ev |= POLLOUT;
      fds.push_back({fd, ev, 0});
    }
    int timeout = -1;
    if (!waiters_.empty()) {
      auto next = waiters_.front().deadline;
      for (const auto& w : waiters_) next = std::min(next, w.deadline);
      timeout = detail::pollTimeoutMs(next);
    }
    int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc < 0 && errno != EINTR) {
      std::fprintf(stderr, "lockstep TCPStore server: poll failed: %s\n", std::strerror(errno));
      return;
    }
    if (rc > 0) {
      if (fds[0].revents != 0) return;  // shutdown
      if (fds[1].revents & POLLIN) accept();
      for (size_t i = 2; i < fds.size(); ++i) {
        int fd = fds[i].fd;
        auto it = clients_.find(fd);
        if (it == clients_.end() || fds[i].revents == 0) continue;
        bool ok = true;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) ok = readFrom(fd, it->second);
        if (ok) ok = processFrames(fd, it->second);
        if (ok) ok = flush(fd, it->second);
        if (!ok) drop(fd);
      }
    }
    wakeWaiters(std::chrono::steady_clock::now());
  }
}

void TCPStoreServer::accept() {
  while (true) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a transient error such as EMFILE: retried on next poll
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    clients_[fd] = Client{};
  }
}

bool TCPStoreServer::readFrom(int fd, Client& c) {
  uint8_t buf[65536];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.insert(c.in.end(), buf, buf + n);
      if (c.in.size() > detail::kMaxFrameBytes + 4 + 65536) return false;  // flooding
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // EOF or error
  }
}

bool TCPStoreServer::processFrames(int fd, Client& c) {
  size_t pos = 0;
  while (!c.parked) {
    const FrameSplit f = detail::nextFrame(c.in.data() + pos, c.in.size() - pos);
    if (f.status == FrameSplit::malformed) return false;
    if (f.status == FrameSplit::incomplete) break;
    if (!handle(fd, c, c.in.data() + pos + 4, f.body_len)) return false;
    pos += 4 + f.body_len;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(pos));
  return true;
}

std::vector<std::string> TCPStoreServer::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (map_.find(k) == map_.end()) out.push_back(k);
  }
  return out;
}

namespace {
void append(std::vector<uint8_t>& out, std::vector<uint8_t>& frame) {
  out.insert(out.end(), frame.begin(), frame.end());
}
}  // namespace

bool TCPStoreServer::handle(int fd, Client& c, const uint8_t* body, size_t n) {
  std::optional<detail::StoreRequest> req = detail::decodeStoreRequest(body, n);
  if (!req) return false;
  detail::StoreRequest& q = *req;
  FrameWriter w;
  bool mutated = false;
  switch (q.cmd) {
    case StoreCmd::set:
      map_[q.keys[0]] = std::move(q.value);
      w.u8(static_cast<uint8_t>(StoreStatus::ok));
      mutated = true;
      break;
    case StoreCmd::get:
    case StoreCmd::wait: {
      Waiter wt{fd, q.cmd == StoreCmd::get, std::move(q.keys),
                std::chrono::steady_clock::now() + std::chrono::milliseconds(q.number)};
      if (!finishWaiter(wt, false)) {
        c.parked = true;
        waiters_.push_back(std::move(wt));
      }
      return true;
    }
    case StoreCmd::add:
      try {
        auto& slot = map_[q.keys[0]];
        int64_t v = detail::addToCounter(q.keys[0], slot, q.number);
        slot = detail::formatCounter(v);
        w.u8(static_cast<uint8_t>(StoreStatus::ok)).i64(v);
        mutated = true;
      } catch (const Error& e) {
        w.u8(static_cast<uint8_t>(StoreStatus::error)).str(e.what());
      }
      break;
    case StoreCmd::compareSet: {
      auto it = map_.find(q.keys[0]);
      w.u8(static_cast<uint8_t>(StoreStatus::ok));
      if (it == map_.end() && !q.value.empty()) {
        w.vec({});
      } else if (it != map_.end() && it->second != q.value) {
        w.vec(it->second);
      } else {
        map_[q.keys[0]] = q.desired;
        w.vec(q.desired);
        mutated = true;
      }
      break;
    }
    case StoreCmd::check:
      w.u8(static_cast<uint8_t>(StoreStatus::ok)).u8(missing(q.keys).empty() ? 1 : 0);
      break;
    case StoreCmd::deleteKey:
      w.u8(static_cast<uint8_t>(StoreStatus::ok)).u8(map_.erase(q.keys[0]) > 0 ? 1 : 0);
      break;
    case StoreCmd::numKeys:
      w.u8(static_cast<uint8_t>(StoreStatus::ok)).i64(static_cast<int64_t>(map_.size()));
      break;
  }
  append(c.out, w.finish());
  if (mutated && !waiters_.empty()) wakeWaiters(std::chrono::steady_clock::now());
  return true;
}

// Answers w if its keys are present (or timed_out); returns whether it was answered.
bool TCPStoreServer::finishWaiter(const Waiter& w, bool timed_out) {
  auto miss = missing(w.keys);
  if (!miss.empty() && !timed_out) return false;
  auto it = clients_.find(w.fd);
  if (it == clients_.end()) return true;
  FrameWriter out;
  if (miss.empty()) {
    out.u8(static_cast<uint8_t>(StoreStatus::ok));
    if (w.is_get) out.vec(map_.at(w.keys[0]));
  } else {
    out.u8(static_cast<uint8_t>(StoreStatus::timeout)).u32(static_cast<uint32_t>(miss.size()));
    for (const auto& k : miss) out.str(k);
  }
  append(it->second.out, out.finish());
  it->second.parked = false;
  return true;
}

void TCPStoreServer::wakeWaiters(std::chrono::steady_clock::time_point now) {
  std::vector<int> resumed;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (finishWaiter(*it, now >= it->deadline)) {
      resumed.push_back(it->fd);
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  // A resumed client may have requests queued behind the one that was parked.
  for (int fd : resumed) {
    auto c = clients_.find(fd);
    if (c == clients_.end()) continue;
    if (!processFrames(fd, c->second) || !flush(fd, c->second)) drop(fd);
  }
}

bool TCPStoreServer::flush(int fd, Client& c) {
  while (c.out_pos < c.out.size()) {
    ssize_t n = ::send(fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;
  }
  c.out.clear();
  c.out_pos = 0;
  return true;
}

void TCPStoreServer::drop(int fd) {
  waiters_.remove_if([fd](const Waiter& w) { return w.fd == fd; });
  clients_.erase(fd);
  ::close(fd);
}

}  // namespace lockstep::comm
