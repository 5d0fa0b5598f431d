#include "lockstep/comm/store/tcp_store.h"

#include <unistd.h>

#include "lockstep/comm/store/tcp_socket.h"
#include "lockstep/comm/store/tcp_store_auth.h"
#include "lockstep/comm/store/tcp_store_protocol.h"
#include "lockstep/comm/store/tcp_store_server.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

using detail::Clock;
using detail::FrameReader;
using detail::FrameWriter;
using detail::StoreCmd;
using detail::StoreStatus;

namespace {
// Extra time the client allows beyond a server-side wait before declaring the server stuck.
constexpr std::chrono::seconds kReplySlack{10};
}  // namespace

TCPStore::TCPStore(const TCPStoreOptions& options)
    : host_(options.host), join_token_(options.join_token), port_(options.port) {
  timeout_ = options.timeout;
  if (options.is_server) {
    server_ = std::make_unique<TCPStoreServer>(options.host, options.port, options.join_token);
    port_ = server_->port();
  } else {
    LOCKSTEP_ENFORCE(options.port != 0, ValueError,
                     "TCPStore client needs the server's port; port 0 is only valid with is_server");
  }
  // Connect eagerly so a wrong address (or token) fails here, not at the first operation.
  giveBack(connect());
}

int TCPStore::connect() {
  int fd = detail::connectWithRetry(host_, port_, Clock::now() + timeout_, "TCPStore");
  if (join_token_.empty()) return fd;
  try {
    auto deadline = Clock::now() + timeout_;
    FrameWriter hello;
    hello.u8(static_cast<uint8_t>(StoreCmd::challenge));
    Reply rep = exchange(fd, hello.finish(), deadline);
    FrameReader r(rep.body.data(), rep.body.size());
    auto nonce = r.value();
    LOCKSTEP_ENFORCE(rep.status == static_cast<uint8_t>(StoreStatus::ok) && nonce && !nonce->empty(),
                     PeerError, where(),
                     " asks for no join token, but this process was given one (LOCKSTEP_JOIN_TOKEN): it is "
                     "not this job's store, or its host was started without the token");
    FrameWriter prove;
    prove.u8(static_cast<uint8_t>(StoreCmd::prove)).vec(detail::authProof(join_token_, *nonce));
    rep = exchange(fd, prove.finish(), deadline);
    LOCKSTEP_ENFORCE(rep.status == static_cast<uint8_t>(StoreStatus::ok), ValueError, where(),
                     " refused this process's join token: give every node and worker the same "
                     "LOCKSTEP_JOIN_TOKEN (or --join-token)");
  } catch (...) {
    ::close(fd);
    throw;
  }
  return fd;
}

TCPStore::Reply TCPStore::exchange(int fd, std::vector<uint8_t>& frame, Clock::time_point deadline) {
  detail::sendAll(fd, frame.data(), frame.size(), deadline, where());
  uint32_t len = 0;
  detail::recvAll(fd, &len, 4, deadline, where());
  LOCKSTEP_ENFORCE(len >= 1 && len <= detail::kMaxFrameBytes, PeerError, where(), ": malformed reply of ",
                   len, " bytes; is this port really a lockstep store?");
  std::vector<uint8_t> body(len);
  detail::recvAll(fd, body.data(), len, deadline, where());
  Reply r;
  r.status = body[0];
  r.body.assign(body.begin() + 1, body.end());
  return r;
}

TCPStore::~TCPStore() {
  for (int fd : idle_) ::close(fd);
}

std::string TCPStore::where() const { return ::lockstep::detail::concat("TCPStore ", host_, ":", port_); }

int TCPStore::takeConnection() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      int fd = idle_.back();
      idle_.pop_back();
      return fd;
    }
  }
  return connect();
}

void TCPStore::giveBack(int fd) {
  std::lock_guard lock(mutex_);
  idle_.push_back(fd);
}

void TCPStore::checkKey(const std::string& key) const {
  LOCKSTEP_ENFORCE(key.size() <= detail::kMaxKeyBytes, ValueError, where(), ": key of ", key.size(),
                   " bytes exceeds the limit of ", detail::kMaxKeyBytes, " bytes");
}

std::vector<uint8_t> TCPStore::keysFrame(uint8_t cmd, const char* op, const std::vector<std::string>& keys,
                                         std::optional<int64_t> timeout_ms) const {
  LOCKSTEP_ENFORCE(keys.size() <= detail::kMaxKeysPerRequest, ValueError, where(), ": ", op,
                   "() on more than ", detail::kMaxKeysPerRequest, " keys");
  FrameWriter w;
  w.u8(cmd).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    checkKey(k);
    w.str(k);
  }
  if (timeout_ms) w.i64(*timeout_ms);
  return std::move(w.finish());
}

TCPStore::Reply TCPStore::request(std::vector<uint8_t>& frame, std::chrono::milliseconds server_wait) {
  int fd = takeConnection();
  try {
    // A request the server answers at once must be answered within the timeout; one it may hold
    // (get/wait) gets its wait plus some slack.
    auto deadline = Clock::now() + timeout_ +
                    (server_wait.count() > 0 ? server_wait + kReplySlack : std::chrono::milliseconds(0));
    Reply r = exchange(fd, frame, deadline);
    // A server that refuses a request may close the connection after its answer.
    if (r.status == static_cast<uint8_t>(StoreStatus::error))
      ::close(fd);
    else
      giveBack(fd);
    return r;
  } catch (const PeerError& e) {
    ::close(fd);  // the stream's state is unknown now: never reuse it
    throw PeerError(::lockstep::detail::concat(e.what(),
                                               "; did the process hosting the store (rank 0 or the "
                                               "launcher) exit?"));
  } catch (...) {
    ::close(fd);
    throw;
  }
}

namespace {
void expectOk(const std::string& where, uint8_t status, FrameReader& r) {
  if (status == static_cast<uint8_t>(StoreStatus::ok)) return;
  auto msg = r.key();
  throw ValueError(::lockstep::detail::concat(where, ": ", msg ? *msg : std::string("request failed")));
}
[[noreturn]] void malformed(const std::string& where) {
  throw PeerError(where + ": malformed reply from the server");
}
}  // namespace

void TCPStore::set(const std::string& key, const std::vector<uint8_t>& value) {
  checkKey(key);
  LOCKSTEP_ENFORCE(value.size() <= detail::kMaxValueBytes, ValueError, where(), ": value of ", value.size(),
                   " bytes for key '", key, "' exceeds the limit of ", detail::kMaxValueBytes, " bytes");
  FrameWriter w;
  w.u8(static_cast<uint8_t>(StoreCmd::set)).str(key).vec(value);
  auto rep = request(w.finish(), std::chrono::milliseconds(0));
  FrameReader r(rep.body.data(), rep.body.size());
  expectOk(where(), rep.status, r);
}

std::vector<uint8_t> TCPStore::get(const std::string& key) {
  checkKey(key);
  FrameWriter w;
  w.u8(static_cast<uint8_t>(StoreCmd::get)).str(key).i64(timeout_.count());
  auto rep = request(w.finish(), timeout_);
  if (rep.status == static_cast<uint8_t>(StoreStatus::timeout)) {
    throw TimeoutError(::lockstep::detail::concat(where(), ": timed out after ", timeout_.count(),
                                                  " ms waiting for key '", key,
                                                  "'; a peer did not publish it (did it start and reach the "
                                                  "same point?)"));
  }
  FrameReader r(rep.body.data(), rep.body.size());
  expectOk(where(), rep.status, r);
  auto v = r.value();
  if (!v) malformed(where());
  return std::move(*v);
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  checkKey(key);
  FrameWriter w;
  w.u8(static_cast<uint8_t>(StoreCmd::add)).str(key).i64(delta);
  auto rep = request(w.finish(), std::chrono::milliseconds(0));
  FrameReader r(rep.body.data(), rep.body.size());
  expectOk(where(), rep.status, r);
  auto v = r.i64();
  if (!v) malformed(where());
  return *v;
}

std::vector<uint8_t> TCPStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                          const std::vector<uint8_t>& desired) {
  checkKey(key);
  LOCKSTEP_ENFORCE(expected.size() <= detail::kMaxValueBytes && desired.size() <= detail::kMaxValueBytes,
                   ValueError, where(), ": compareSet value exceeds the limit of ", detail::kMaxValueBytes,
                   " bytes");
  FrameWriter w;
  w.u8(static_cast<uint8_t>(StoreCmd::compareSet)).str(key).vec(expected).vec(desired);
  auto rep = request(w.finish(), std::chrono::milliseconds(0));
  FrameReader r(rep.body.data(), rep.body.size());
  expectOk(where(), rep.status, r);
  auto v = r.value();
  if (!v) malformed(where());
  return std::move(*v);
}

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<uint8_t> frame = keysFrame(static_cast<uint8_t>(StoreCmd::wait), "wait", keys, timeout.count());
  auto rep = request(frame, timeout);
  FrameReader r(rep.body.data(), rep.body.size());
  if (rep.status == static_cast<uint8_t>(StoreStatus::timeout)) {
    auto miss = r.keys();
    throw TimeoutError(::lockstep::detail::concat(where(), ": timed out after ", timeout.count(),
                                                  " ms waiting for keys ",
                                                  detail::joinKeys(miss ? *miss : keys),
                                                  "; a peer did not publish them (did it start and reach the "
                                                  "same point?)"));
  }
  expectOk(where(), rep.status, r);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  std::vector<uint8_t> frame = keysFrame(static_cast<uint8_t>(StoreCmd::check), "check", keys);
  auto rep = request(frame, std::chrono::milliseconds(0));
  FrameReader r(rep.body.data(), rep.body.size());
  expectOk(where(), rep.status, r);
  auto v = r.u8();
  if (!v) malformed(where());
  return *v != 0;
}

bool TCPStore::deleteKey(const std::string& key) {
  checkKey(key);
  FrameWriter w;
  w.u8(static_cast<uint8_t>(StoreCmd::deleteKey)).str(key);
  auto rep = request(w.finish(), std::chrono::milliseconds(0));
  FrameReader r(rep.body.data(), rep.body.size());
  expectOk(where(), rep.status, r);
  auto v = r.u8();
  if (!v) malformed(where());
  return *v != 0;
}

int64_t TCPStore::numKeys() {
  FrameWriter w;
  w.u8(static_cast<uint8_t>(StoreCmd::numKeys));
  auto rep = request(w.finish(), std::chrono::milliseconds(0));
  FrameReader r(rep.body.data(), rep.body.size());
  expectOk(where(), rep.status, r);
  auto v = r.i64();
  if (!v) malformed(where());
  return *v;
}

}  // namespace lockstep::comm
