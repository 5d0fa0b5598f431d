#pragma once
// Wire format of TCPStore (internal). Every message is a frame: u32 body length, then the body.
// Request body: u8 command, then fields. Reply body: u8 status, then fields.
// Fields: bytes = u32 length + data, i64 = 8 bytes; all little-endian (host order on the x86 and
// ARM hosts lockstep runs on). Lengths are bounded so a garbage frame is detected early and only
// closes the connection that sent it.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::comm::detail {

enum class StoreCmd : uint8_t {
  set = 1,         // key, value                -> ok
  get = 2,         // key, i64 timeout_ms       -> ok value | timeout
  add = 3,         // key, i64 delta            -> ok i64 | error msg
  compareSet = 4,  // key, expected, desired    -> ok value
  wait = 5,        // u32 n, n keys, timeout_ms -> ok | timeout (u32 n, missing keys)
  check = 6,       // u32 n, n keys             -> ok u8
  deleteKey = 7,   // key                       -> ok u8
  numKeys = 8,     //                           -> ok i64
  // The join-token handshake (tcp_store_auth.h), the first two requests on a connection to a
  // server that has a token; before it succeeds any other request is refused and the connection
  // closed.
  challenge = 9,  //                             -> ok nonce | error msg (the server has no token)
  prove = 10,     // proof                       -> ok | error msg (then the server closes)
};
/// Frames a client may send before it has proven the token: the handshake's own, small.
inline constexpr uint32_t kMaxPreAuthFrameBytes = 256;
enum class StoreStatus : uint8_t { ok = 0, timeout = 1, error = 2 };

inline constexpr uint32_t kMaxKeyBytes = 4096;
inline constexpr uint32_t kMaxValueBytes = 64u << 20;
inline constexpr uint32_t kMaxKeysPerRequest = 65536;
inline constexpr uint32_t kMaxFrameBytes = 2 * kMaxValueBytes + 2 * kMaxKeyBytes + 64;

/// Builds a frame; finish() patches the length prefix.
class FrameWriter {
 public:
  FrameWriter() { buf_.resize(4); }
  FrameWriter& u8(uint8_t v) {
    buf_.push_back(v);
    return *this;
  }
  FrameWriter& u32(uint32_t v) { return raw(&v, 4); }
  FrameWriter& i64(int64_t v) { return raw(&v, 8); }
  FrameWriter& bytes(const void* p, size_t n) {
    u32(static_cast<uint32_t>(n));
    return raw(p, n);
  }
  FrameWriter& str(const std::string& s) { return bytes(s.data(), s.size()); }
  FrameWriter& vec(const std::vector<uint8_t>& v) { return bytes(v.data(), v.size()); }
  std::vector<uint8_t>& finish() {
    uint32_t n = static_cast<uint32_t>(buf_.size() - 4);
    std::memcpy(buf_.data(), &n, 4);
    return buf_;
  }

 private:
  FrameWriter& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    buf_.insert(buf_.end(), b, b + n);
    return *this;
  }
  std::vector<uint8_t> buf_;
};

/// Parses a frame body; every getter returns nullopt when the body is too short or a length
/// exceeds its bound (the caller then drops the connection).
class FrameReader {
 public:
  FrameReader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  std::optional<uint8_t> u8() {
    if (pos_ + 1 > n_) return std::nullopt;
    return p_[pos_++];
  }
  std::optional<uint32_t> u32() { return raw<uint32_t>(); }
  std::optional<int64_t> i64() { return raw<int64_t>(); }
  std::optional<std::string> key() {
    auto b = span(kMaxKeyBytes);
    if (!b) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(p_ + b->first), b->second);
  }
  std::optional<std::vector<uint8_t>> value() {
    auto b = span(kMaxValueBytes);
    if (!b) return std::nullopt;
    return std::vector<uint8_t>(p_ + b->first, p_ + b->first + b->second);
  }
  std::optional<std::vector<std::string>> keys() {
    auto n = u32();
    if (!n || *n > kMaxKeysPerRequest) return std::nullopt;
    std::vector<std::string> out;
    for (uint32_t i = 0; i < *n; ++i) {
      auto k = key();
      if (!k) return std::nullopt;
      out.push_back(std::move(*k));
    }
    return out;
  }
  bool atEnd() const { return pos_ == n_; }

 private:
  template <typename T>
  std::optional<T> raw() {
    if (pos_ + sizeof(T) > n_) return std::nullopt;
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::optional<std::pair<size_t, size_t>> span(uint32_t max) {
    auto n = u32();
    if (!n || *n > max || pos_ + *n > n_) return std::nullopt;
    auto r = std::make_pair(pos_, static_cast<size_t>(*n));
    pos_ += *n;
    return r;
  }
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

}  // namespace lockstep::comm::detail
