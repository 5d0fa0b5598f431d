#pragma once
// Decoding what a TCPStore client sends (internal; the wire format is in tcp_store_protocol.h):
// pure functions, so that the server and the fuzzer (tests/fuzz/) read bytes the same way.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/store/tcp_store_protocol.h"

namespace lockstep::comm::detail {

/// One request, its fields by meaning.
struct StoreRequest {
  StoreCmd cmd = StoreCmd::set;
  std::vector<std::string> keys;  // one for set/get/add/compareSet/deleteKey; n for wait/check
  std::vector<uint8_t> value;     // set: the value; compareSet: the expected value
  std::vector<uint8_t> desired;   // compareSet: the new value
  int64_t number = 0;             // get/wait: the timeout in ms (>= 0); add: the delta
};

/// The longest timeout a request gets (about 35 years): more would overflow a deadline in
/// nanoseconds of steady_clock.
inline constexpr int64_t kMaxStoreTimeoutMs = int64_t{1} << 40;

/// Decodes one frame body. nullopt when it is malformed: an unknown command, a field cut short, a
/// length over its bound, a negative timeout, or bytes left over (the server then drops the client).
/// A timeout over kMaxStoreTimeoutMs is lowered to it.
std::optional<StoreRequest> decodeStoreRequest(const uint8_t* body, size_t n);

/// The frame at the front of buf[0, n): complete (body_len holds its body's length), incomplete
/// (more bytes needed; body_len is the announced length once the prefix is in, else 0) or
/// malformed (a zero or oversized length prefix).
struct FrameSplit {
  enum Status { complete, incomplete, malformed } status = incomplete;
  size_t body_len = 0;
};
FrameSplit nextFrame(const uint8_t* buf, size_t n);

}  // namespace lockstep::comm::detail
