#pragma once
// The gloo backend's reduce-scatter (internal): a ring over Gloo's unbound buffers, the
// primitives Gloo's own ring allreduce is built on.
//
// Why not Gloo's ReduceScatterHalvingDoubling (gloo/reduce_scatter.h, the only reduce-scatter in
// Debian's libgloo 0.0~git20220518)? It is the legacy bound-buffer API: its waits take no timeout
// (the pair's, fixed at connect, applies instead of the op's deadline), its count is an int, and
// every construction zero-fills two input-sized scratch vectors and registers 4n(n-1) slots.
// bench/gloo_reduce_scatter.cpp (2 ranks, loopback, 64 MiB): built per call it took 3-5x the time
// of an allreduce of the same input, built once about as long as the allreduce (0.8-1.3x), this
// ring 0.4-0.5x; and in back-to-back calls at 16 and 64 MiB a few of its outputs were wrong (9 of
// about 1,300 calls; the allreduce and this ring, checked the same way, never were). The ring
// honours the op's deadline, counts in size_t, and each rank sends (n-1)/n of its input: half of
// a ring allreduce.
#include <cstdint>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/reduce_op.h"

namespace gloo {
class Context;
}

namespace lockstep::comm::gloo_detail {

/// out (count elements) = block context.rank of op over every rank's in (size * count elements).
/// avg divides in the last combining pass. workspace is reused between calls (two blocks). Gloo
/// errors propagate (the caller names the op); waits end at ctx.deadline. Collective.
void ringReduceScatter(::gloo::Context& context, const OpContext& ctx, const void* in, void* out,
                       size_t count, DType dtype, ReduceOp op, std::vector<uint8_t>& workspace);

}  // namespace lockstep::comm::gloo_detail
