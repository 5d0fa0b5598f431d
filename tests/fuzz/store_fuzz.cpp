// libFuzzer target: what the TCPStore server reads from a client (comm/store/tcp_store_request.h):
// the input is a byte stream cut into frames as the server cuts it, each frame decoded, and the
// decoded requests applied to a map as the server applies set/add/compareSet/deleteKey.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lockstep/comm/store/store.h"
#include "lockstep/comm/store/tcp_store_request.h"
#include "lockstep/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep::comm::detail;
  std::map<std::string, std::vector<uint8_t>> map;
  size_t pos = 0;
  while (true) {
    const FrameSplit f = nextFrame(data + pos, size - pos);
    if (f.status != FrameSplit::complete) break;
    const auto q = decodeStoreRequest(data + pos + 4, f.body_len);
    pos += 4 + f.body_len;
    if (!q) break;  // the server drops the client here
    LOCKSTEP_CHECK(q->number >= 0 || q->cmd == StoreCmd::add);
    LOCKSTEP_CHECK(q->number <= kMaxStoreTimeoutMs || q->cmd == StoreCmd::add);
    switch (q->cmd) {
      case StoreCmd::set:
        map[q->keys.at(0)] = q->value;
        break;
      case StoreCmd::add:
        try {
          map[q->keys.at(0)] = formatCounter(addToCounter(q->keys.at(0), map[q->keys.at(0)], q->number));
        } catch (const lockstep::ValueError&) {
        }
        break;
      case StoreCmd::compareSet:
        if (map.count(q->keys.at(0)) ? map[q->keys[0]] == q->value : q->value.empty())
          map[q->keys[0]] = q->desired;
        break;
      case StoreCmd::deleteKey:
        map.erase(q->keys.at(0));
        break;
      default:
        break;
    }
  }
  return 0;
}
