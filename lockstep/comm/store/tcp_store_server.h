#pragma once
// The TCPStore server: one background thread multiplexing every client with poll(). It keeps
// the map, answers requests in arrival order per client, and parks blocking get()/wait()
// requests until their keys appear or their deadline passes. A client that sends garbage, an
// oversized frame or disconnects mid-request is dropped; the server itself never stops for it.
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace lockstep::comm {

namespace detail {
class FrameReader;
class FrameWriter;
}  // namespace detail

class TCPStoreServer {
 public:
  /// Listens on all interfaces at port (0: a free port); host is only used in messages.
  /// IoError naming host:port when the port is taken. Starts the thread. With a non-empty
  /// join_token every client must pass the handshake of tcp_store_auth.h before any other
  /// request; one that does not is answered with an error, logged on stderr and disconnected.
  TCPStoreServer(const std::string& host, uint16_t port, std::string join_token = "");
  /// Stops the thread and closes every connection.
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  /// The port actually bound.
  uint16_t port() const { return port_; }

 private:
  struct Client {
    std::vector<uint8_t> in;
    std::vector<uint8_t> out;
    size_t out_pos = 0;
    bool parked = false;   // a blocking request is outstanding; later requests wait behind it
    bool authed = false;   // passed the handshake (or the server has no token)
    bool closing = false;  // refused: close once the error reply is sent
    std::vector<uint8_t> nonce;
    std::string peer;  // "address:port", for the log
    std::chrono::steady_clock::time_point accepted;
  };
  struct Waiter {
    int fd;
    bool is_get;
    std::vector<std::string> keys;
    std::chrono::steady_clock::time_point deadline;
  };
  using Map = std::unordered_map<std::string, std::vector<uint8_t>>;

  void run();
  void accept();
  bool readFrom(int fd, Client& c);  // false: drop the client
  bool processFrames(int fd, Client& c);
  bool handle(int fd, Client& c, const uint8_t* body, size_t n);  // false: malformed
  bool flush(int fd, Client& c);                                  // false: drop the client
  void drop(int fd);
  // Handshake requests and the refusal of anything else before it.
  bool handlePreAuth(Client& c, uint8_t cmd, detail::FrameReader& r, detail::FrameWriter& w);
  void refuse(Client& c, const std::string& why, detail::FrameWriter& w);
  void dropStalePreAuth(std::chrono::steady_clock::time_point now);
  void wakeWaiters(std::chrono::steady_clock::time_point now);
  bool finishWaiter(const Waiter& w, bool timed_out);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  std::string host_;
  std::string join_token_;
  uint64_t refused_ = 0;  // clients refused so far (the log names the first ones, then counts)
  uint16_t port_ = 0;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
  std::map<int, Client> clients_;
  std::list<Waiter> waiters_;
  Map map_;
};

}  // namespace lockstep::comm
