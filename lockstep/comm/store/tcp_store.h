#pragma once
// Client (and optionally host) of a TCP key-value store (c10d's TCPStore). The launcher agent or
// rank 0 hosts the server; every rank connects as a client.
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

class TCPStoreServer;
namespace detail {
using Clock = std::chrono::steady_clock;
}

struct TCPStoreOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 29500;  // 0 = pick a free port (server only); see TCPStore::port()
  bool is_server =
      false;  // this instance hosts the server (in-process background thread) and is also a client
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // connect + operation timeout
  /// The job's secret (LOCKSTEP_JOIN_TOKEN, tcp_store_auth.h). A server with one refuses every
  /// client that does not prove it holds it; a client with one proves it on every connection and
  /// refuses a server that asks for none. Empty: no handshake.
  std::string join_token{};
};

/// Thread-safe: concurrent calls use separate connections, so a blocking get() in one thread
/// never delays a set() in another. Keys are at most 4 KiB and values at most 64 MiB.
class TCPStore : public Store {
 public:
  /// Starts the server first when options.is_server (IoError naming host:port when the port is
  /// taken), then connects, retrying until options.timeout (TimeoutError naming host:port).
  explicit TCPStore(const TCPStoreOptions& options);
  ~TCPStore() override;
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  /// The server's port (the bound one when options.port was 0).
  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }

  LOCKSTEP_STORE_OPS_OVERRIDE

 private:
  struct Reply {
    uint8_t status = 0;
    std::vector<uint8_t> body;  // after the status byte
  };
  // Sends one request frame on an idle connection and returns the reply. server_wait is how long
  // the server may legitimately hold the request (get/wait).
  Reply request(std::vector<uint8_t>& frame, std::chrono::milliseconds server_wait);
  int takeConnection();
  // A new connection, authenticated when there is a join token.
  int connect();
  Reply exchange(int fd, std::vector<uint8_t>& frame, detail::Clock::time_point deadline);
  void giveBack(int fd);
  std::string where() const;
  void checkKey(const std::string& key) const;
  /// The frame of a request naming keys (wait, check): each key checked, at most kMaxKeysPerRequest.
  std::vector<uint8_t> keysFrame(uint8_t cmd, const char* op, const std::vector<std::string>& keys,
                                 std::optional<int64_t> timeout_ms = std::nullopt) const;

  std::string host_;
  std::string join_token_;
  uint16_t port_;
  std::unique_ptr<TCPStoreServer> server_;
  std::mutex mutex_;
  std::vector<int> idle_;  // connected sockets not in use by any thread
};

}  // namespace lockstep::comm
