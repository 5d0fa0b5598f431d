#pragma once
// The gloo backend's op check (internal). Before each collective every rank sends a small
// descriptor (seq, op, count, dtype, root) to every peer and waits for theirs. This costs one
// small message round per op and buys what gloo lacks: an error naming the ranks that did not
// arrive (not just "timed out"), and a clear error when ranks issued different collectives in
// the same slot instead of a hang or silently mixed data.
#include <chrono>
#include <cstdint>

#include "lockstep/comm/process_group.h"

namespace gloo {
class Context;
}

namespace lockstep::comm::gloo_detail {

struct GlooOpDesc {
  uint64_t seq = 0;
  uint64_t count = 0;
  int32_t root = -1;
  uint8_t type = 0;
  uint8_t dtype = 0;
  uint8_t op = 0;
  uint8_t pad = 0;
  bool operator==(const GlooOpDesc&) const = default;
};

/// Exchanges descriptors with every peer of context; TimeoutError naming the ranks whose
/// descriptor did not come before ctx.deadline, PeerError naming ranks whose connection broke or
/// whose op differs. Called by the group's op runner only.
void exchangeOpDescs(::gloo::Context& context, const OpContext& ctx, const GlooOpDesc& mine);
/// Time left until ctx.deadline, at least 1 ms (gloo treats 0 as "no timeout").
std::chrono::milliseconds remaining(const OpContext& ctx);

}  // namespace lockstep::comm::gloo_detail
