#pragma once
// Small host values written into device memory in stream order (built with LOCKSTEP_CUDA only): the
// scalars a CUDA graph's captured kernels read, rewritten by the host before each replay
// (optim::Optimizer's captured update scalars, kernels::PhiloxCapture's generator states).
#include <cstdint>
#include <span>

#include "lockstep/tensor/device.h"

namespace lockstep::kernels::cuda {

/// dst[i] = words[i] by kernels queued on device's current stream that carry the words in their
/// parameters: `words` may be reused as soon as this returns, the host never waits, and work queued
/// after it on that stream sees the values. A call made while that stream is being captured into a
/// CUDA graph becomes part of the graph; call it outside a capture to feed one.
void writeWords(uint64_t* dst, std::span<const uint64_t> words, const Device& device);

}  // namespace lockstep::kernels::cuda
