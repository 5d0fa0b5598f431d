#pragma once
// The cpu backend's split of a flat loop across the intra-op threads by fixed chunks: what a chunk
// computes depends on its bounds alone, never on the thread that runs it or how many there are, so
// reductions that combine the chunks' results in chunk order are the same with any thread count.
#include <algorithm>
#include <cstdint>

#include "lockstep/kernels/threads.h"

namespace lockstep::kernels::cpu {

/// body(c, begin, end) for each chunk c = [c * chunk, min(n, (c + 1) * chunk)) of [0, n): spread over
/// the intra-op threads when there are several chunks and threads, else in order on this thread.
template <typename Body>
void forEachChunk(int64_t n, int64_t chunk, Body&& body) {
  const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (chunks > 1 && numThreads() > 1)
  for (int64_t c = 0; c < chunks; ++c) body(c, c * chunk, std::min(n, (c + 1) * chunk));
}

}  // namespace lockstep::kernels::cpu
