#include "lockstep/comm/store/tcp_store_request.h"

#include <algorithm>
#include <cstring>

namespace lockstep::comm::detail {

std::optional<StoreRequest> decodeStoreRequest(const uint8_t* body, size_t n) {
  FrameReader r(body, n);
  auto cmd = r.u8();
  if (!cmd) return std::nullopt;
  StoreRequest q;
  q.cmd = static_cast<StoreCmd>(*cmd);
  auto oneKey = [&]() {
    auto k = r.key();
    if (!k) return false;
    q.keys.push_back(std::move(*k));
    return true;
  };
  auto someKeys = [&]() {
    auto ks = r.keys();
    if (!ks) return false;
    q.keys = std::move(*ks);
    return true;
  };
  auto value = [&](std::vector<uint8_t>& out) {
    auto v = r.value();
    if (!v) return false;
    out = std::move(*v);
    return true;
  };
  auto number = [&](bool non_negative) {
    auto v = r.i64();
    if (!v || (non_negative && *v < 0)) return false;
    q.number = non_negative ? std::min(*v, kMaxStoreTimeoutMs) : *v;
    return true;
  };
  bool ok = false;
  switch (q.cmd) {
    case StoreCmd::set:
      ok = oneKey() && value(q.value);
      break;
    case StoreCmd::get:
      ok = oneKey() && number(true);
      break;
    case StoreCmd::wait:
      ok = someKeys() && number(true);
      break;
    case StoreCmd::add:
      ok = oneKey() && number(false);
      break;
    case StoreCmd::compareSet:
      ok = oneKey() && value(q.value) && value(q.desired);
      break;
    case StoreCmd::check:
      ok = someKeys();
      break;
    case StoreCmd::deleteKey:
      ok = oneKey();
      break;
    case StoreCmd::challenge:
    case StoreCmd::prove:  // the join-token handshake: not a store request (tcp_store_auth.h)
      ok = false;
      break;
    case StoreCmd::numKeys:
      ok = true;
      break;
  }
  if (!ok || !r.atEnd()) return std::nullopt;
  return q;
}

FrameSplit nextFrame(const uint8_t* buf, size_t n) {
  if (n < 4) return {};
  uint32_t len;
  std::memcpy(&len, buf, 4);
  if (len == 0 || len > kMaxFrameBytes) return {FrameSplit::malformed, 0};
  if (n - 4 < len) return {FrameSplit::incomplete, len};
  return {FrameSplit::complete, len};
}

}  // namespace lockstep::comm::detail
