#include "lockstep/comm/store/tcp_store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "lockstep/comm/store/store.h"
#include "lockstep/comm/store/tcp_socket.h"
#include "lockstep/comm/store/tcp_store_auth.h"
#include "lockstep/comm/store/tcp_store_protocol.h"
#include "lockstep/comm/store/tcp_store_request.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

using detail::FrameReader;
using detail::FrameSplit;
using detail::FrameWriter;
using detail::StoreCmd;
using detail::StoreStatus;

namespace {
// Clients that have not proven the token yet: at most this many are kept (the oldest is dropped
// for a new one), each for at most kPreAuthDeadline, so a flood of idle or garbage connections
// costs bounded memory and file descriptors and never blocks the job's own clients.
constexpr size_t kMaxPreAuthClients = 256;
constexpr auto kPreAuthDeadline = std::chrono::seconds(10);
constexpr size_t kMaxPreAuthBuffered = 4096;

void append(std::vector<uint8_t>& out, std::vector<uint8_t>& frame) {
  out.insert(out.end(), frame.begin(), frame.end());
}

std::string peerName(int fd) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    port = ntohs(v6->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}
}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, uint16_t port, std::string join_token)
    : host_(host), join_token_(std::move(join_token)) {
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
    if (!join_token_.empty()) {
      for (const auto& [fd, c] : clients_) {
        if (!c.authed) {
          timeout = timeout < 0 ? 1000 : std::min(timeout, 1000);
          break;
        }
      }
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
        if (ok && it->second.closing && it->second.out.empty()) ok = false;  // refused: reply sent
        if (!ok) drop(fd);
      }
    }
    wakeWaiters(std::chrono::steady_clock::now());
    if (!join_token_.empty()) dropStalePreAuth(std::chrono::steady_clock::now());
  }
}

void TCPStoreServer::accept() {
  while (true) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a transient error such as EMFILE: retried on next poll
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Client c;
    c.authed = join_token_.empty();
    c.accepted = std::chrono::steady_clock::now();
    if (!c.authed) {
      c.peer = peerName(fd);
      // Too many unproven clients: the oldest goes (ours prove themselves within a round trip).
      size_t pending = 0;
      int oldest = -1;
      for (const auto& [ofd, oc] : clients_) {
        if (oc.authed) continue;
        ++pending;
        if (oldest < 0 || oc.accepted < clients_.at(oldest).accepted) oldest = ofd;
      }
      if (pending >= kMaxPreAuthClients && oldest >= 0) drop(oldest);
    }
    clients_[fd] = std::move(c);
  }
}

void TCPStoreServer::dropStalePreAuth(std::chrono::steady_clock::time_point now) {
  std::vector<int> stale;
  for (const auto& [fd, c] : clients_)
    if (!c.authed && now - c.accepted > kPreAuthDeadline) stale.push_back(fd);
  for (int fd : stale) {
    auto& c = clients_.at(fd);
    FrameWriter w;
    refuse(c, "no join token proof within 10 s", w);
    drop(fd);
  }
}

void TCPStoreServer::refuse(Client& c, const std::string& why, FrameWriter& w) {
  ++refused_;
  if (refused_ <= 10 || refused_ % 100 == 0) {
    std::fprintf(stderr,
                 "lockstep TCPStore server on port %u: refused client %s: %s (%llu refused so far; a "
                 "client must prove it holds the job's join token, docs/security.md)\n",
                 static_cast<unsigned>(port_), c.peer.c_str(), why.c_str(),
                 static_cast<unsigned long long>(refused_));
  }
  w.u8(static_cast<uint8_t>(StoreStatus::error))
      .str("this store requires the job's join token (LOCKSTEP_JOIN_TOKEN) and refused this client: " + why);
  c.closing = true;
}

bool TCPStoreServer::handlePreAuth(Client& c, uint8_t cmd, FrameReader& r, FrameWriter& w) {
  if (static_cast<StoreCmd>(cmd) == StoreCmd::challenge && r.atEnd() && c.nonce.empty()) {
    c.nonce = detail::authNonce();
    w.u8(static_cast<uint8_t>(StoreStatus::ok)).vec(c.nonce);
    return true;
  }
  if (static_cast<StoreCmd>(cmd) == StoreCmd::prove && !c.nonce.empty()) {
    auto proof = r.value();
    if (proof && r.atEnd() && detail::authProofMatches(join_token_, c.nonce, *proof)) {
      c.authed = true;
      c.nonce.clear();
      w.u8(static_cast<uint8_t>(StoreStatus::ok));
      return true;
    }
    refuse(c, "wrong join token", w);
    return true;
  }
  refuse(c, "request " + std::to_string(cmd) + " before proving the join token", w);
  return true;
}

bool TCPStoreServer::readFrom(int fd, Client& c) {
  uint8_t buf[65536];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      c.in.insert(c.in.end(), buf, buf + n);
      if (c.in.size() > detail::kMaxFrameBytes + 4 + 65536) return false;  // flooding
      if (!c.authed && c.in.size() > kMaxPreAuthBuffered) {
        ++refused_;
        return false;  // far more than a handshake: garbage
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // EOF or error
  }
}

bool TCPStoreServer::processFrames(int fd, Client& c) {
  size_t pos = 0;
  while (!c.parked && !c.closing) {
    const FrameSplit f = detail::nextFrame(c.in.data() + pos, c.in.size() - pos);
    if (f.status == FrameSplit::malformed) return false;
    // Known from the length prefix alone: before the proof, only handshake-sized frames.
    if (!c.authed && f.body_len > detail::kMaxPreAuthFrameBytes) {
      FrameWriter w;
      refuse(c, "a " + std::to_string(f.body_len) + "-byte request before proving the join token", w);
      append(c.out, w.finish());
      break;
    }
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

bool TCPStoreServer::handle(int fd, Client& c, const uint8_t* body, size_t n) {
  FrameWriter w;
  // The handshake's two commands are not store requests: answered here, before decoding.
  const bool handshake = n >= 1 && (body[0] == static_cast<uint8_t>(StoreCmd::challenge) ||
                                    body[0] == static_cast<uint8_t>(StoreCmd::prove));
  if (!c.authed || handshake) {
    FrameReader r(body, n);
    auto cmd = r.u8();
    if (!cmd) return false;
    if (!c.authed) {
      handlePreAuth(c, *cmd, r, w);
    } else {
      w.u8(static_cast<uint8_t>(StoreStatus::error))
          .str(join_token_.empty() ? "this store has no join token"
                                   : "this connection is already authenticated");
    }
    append(c.out, w.finish());
    return true;
  }
  std::optional<detail::StoreRequest> req = detail::decodeStoreRequest(body, n);
  if (!req) return false;
  detail::StoreRequest& q = *req;
  bool mutated = false;
  switch (q.cmd) {
    case StoreCmd::challenge:
    case StoreCmd::prove:  // answered above; decodeStoreRequest refuses them
      return false;
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
