#include "lockstep/comm/gloo/gloo_reduce_scatter.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "lockstep/comm/gloo/gloo_op_check.h"
#include "lockstep/util/error.h"

namespace lockstep::comm::gloo_detail {

namespace {

constexpr uint8_t kReduceScatterSlotPrefix = 0xf2;
// Blocks travel in segments so that a rank reduces segment k while segment k+1 is on the wire,
// and passes segment k on before the rest of its block has arrived.
constexpr size_t kSegmentBytes = 1 << 20;

using Buffer = std::unique_ptr<::gloo::transport::UnboundBuffer>;

void wait(bool completed, const OpContext& ctx, const char* what) {
  LOCKSTEP_ENFORCE(completed, PeerError, ctx.name, ": gloo aborted a ", what, " of the ring reduce-scatter");
}

}  // namespace

void ringReduceScatter(::gloo::Context& context, const OpContext& ctx, const void* in_ptr, void* out_ptr,
                       size_t count, DType dtype, ReduceOp op, std::vector<uint8_t>& workspace) {
  const int n = context.size, r = context.rank;
  const size_t es = dtypeSize(dtype), block = count * es;
  auto* in = static_cast<uint8_t*>(const_cast<void*>(in_ptr));  // only ever sent from
  auto* out = static_cast<uint8_t*>(out_ptr);
  if (count == 0) return;
  if (n == 1) {
    std::memcpy(out, in, block);  // avg over one rank: itself
    return;
  }
  // Step s (0 <= s < n-1): send block (r-s-1) to the right, receive block (r-s-2) from the left and
  // combine it with this rank's own copy; that partial result is what step s+1 sends. The last
  // step receives block r, whose combination is the output.
  const int right = (r + 1) % n, left = (r + n - 1) % n, steps = n - 1;
  auto blockOf = [&](int s) { return static_cast<size_t>(((r - s) % n + n) % n); };
  const size_t seg = std::min(block, std::max<size_t>(1, kSegmentBytes / es) * es);
  const size_t nseg = (block + seg - 1) / seg;
  auto segBytes = [&](size_t k) { return std::min(seg, block - k * seg); };
  const uint64_t slot = ::gloo::Slot::build(kReduceScatterSlotPrefix, static_cast<uint32_t>(ctx.seq));

  // Partial results alternate between two halves of the workspace: step s receives into half
  // s % 2 while half (s+1) % 2 is still being sent on. One unbound buffer per segment keeps a
  // single operation pending on each (Gloo's rule for unbound buffers).
  const int halves = steps > 1 ? 2 : 1;
  workspace.resize(halves * block);
  std::vector<Buffer> first(nseg), part(halves * nseg);
  std::vector<bool> sending(halves * nseg, false);
  for (size_t k = 0; k < nseg; ++k) {
    first[k] = context.createUnboundBuffer(in + blockOf(1) * block + k * seg, segBytes(k));
    first[k]->send(right, slot);
  }
  for (int h = 0; h < halves; ++h) {
    for (size_t k = 0; k < nseg; ++k) {
      part[h * nseg + k] = context.createUnboundBuffer(workspace.data() + h * block + k * seg, segBytes(k));
    }
  }
  for (int s = 0; s < steps; ++s) {
    const int h = s % 2;
    const bool last = s == steps - 1;
    const uint8_t* mine = in + blockOf(s + 2) * block;
    for (size_t k = 0; k < nseg; ++k) {
      auto& b = part[h * nseg + k];
      if (sending[h * nseg + k]) {  // step s-1 sent this segment on
        wait(b->waitSend(remaining(ctx)), ctx, "send");
        sending[h * nseg + k] = false;
      }
      b->recv(left, slot);
    }
    for (size_t k = 0; k < nseg; ++k) {
      auto& b = part[h * nseg + k];
      wait(b->waitRecv(remaining(ctx)), ctx, "receive");
      auto* p = static_cast<uint8_t*>(b->ptr);
      const size_t elems = segBytes(k) / es;
      if (last) {
        reduceInto(out + k * seg, mine + k * seg, p, elems, dtype, op, nullptr, op == ReduceOp::avg ? n : 1);
      } else {
        reduceInto(p, mine + k * seg, p, elems, dtype, op);
        b->send(right, slot);
        sending[h * nseg + k] = true;
      }
    }
  }
  for (auto& b : first) wait(b->waitSend(remaining(ctx)), ctx, "send");
  for (size_t i = 0; i < part.size(); ++i) {
    if (sending[i]) wait(part[i]->waitSend(remaining(ctx)), ctx, "send");
  }
}

}  // namespace lockstep::comm::gloo_detail
