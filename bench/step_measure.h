#pragma once
// What the single-op benches (bench/attention.cpp, bench/lm_head.cpp) share: a step's time and the
// peak bytes it holds beyond what was in use before it, on the CPU's allocator (tensor/allocator.h)
// or on GPU 0's (its peak, as torch.cuda.max_memory_allocated). Header-only: every bench/*.cpp is a
// program of its own.
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>

#include "lockstep/tensor/allocator.h"
#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/allocator.h"
#include "lockstep/tensor/cuda/runtime.h"
#endif

namespace lockstep::bench {

/// Whether `device` ("cpu" or "cuda") can run here; false, having said why on stderr, for cuda in a
/// build without CUDA.
inline bool deviceBuiltIn(const char* program, const std::string& device) {
#if !LOCKSTEP_WITH_CUDA
  if (device == "cuda") {
    std::fprintf(stderr, "%s: built without CUDA; --device cuda needs a LOCKSTEP_CUDA build\n", program);
    return false;
  }
#endif
  return true;
}

struct StepMeasure {
  double ms = 0;          // per timed step
  size_t peak_bytes = 0;  // the warm-up step's peak beyond the bytes in use before it
};

/// Runs step once as a warm-up (library choices: cuDNN's plans, cuBLASLt's algorithms), which also
/// gives the peak, then `steps` times, timed; on a GPU waiting for it after each part.
inline StepMeasure measureStep(const std::function<void()>& step, int steps, bool gpu) {
  auto in_use = [&] {
#if LOCKSTEP_WITH_CUDA
    if (gpu) return lockstep::cuda::CudaCachingAllocator::forDevice(0).stats().allocated_current;
#endif
    return CachingAllocator::instance().stats().bytes_in_use;
  };
  auto peak_in_use = [&] {
#if LOCKSTEP_WITH_CUDA
    if (gpu) return lockstep::cuda::CudaCachingAllocator::forDevice(0).stats().allocated_peak;
#endif
    return CachingAllocator::instance().stats().peak_bytes_in_use;
  };
  auto sync = [&] {
#if LOCKSTEP_WITH_CUDA
    if (gpu) lockstep::cuda::currentStream(0).synchronize();
#endif
  };
#if LOCKSTEP_WITH_CUDA
  if (gpu) lockstep::cuda::CudaCachingAllocator::forDevice(0).resetPeakStats();
#endif
  StepMeasure m;
  const size_t before = in_use();
  step();
  sync();
  m.peak_bytes = peak_in_use() - before;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  sync();
  m.ms = 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  return m;
}

}  // namespace lockstep::bench
