#include "lockstep/kernels/gpu_math_options.h"

#include <atomic>
#include <cstdint>

namespace lockstep::kernels {

namespace {

// The switches as bits of one word, so a read is one atomic load (kernels read them per call).
enum Bit : uint32_t {
  kDeterministic = 1u << 0,
  kBenchmark = 1u << 1,
  kCudnnTf32 = 1u << 2,
  kMatmulTf32 = 1u << 3,
  kCudnnSdp = 1u << 4,
};

uint32_t pack(const GpuMathOptions& o) {
  return (o.cudnn_deterministic ? kDeterministic : 0u) | (o.cudnn_benchmark ? kBenchmark : 0u) |
         (o.cudnn_allow_tf32 ? kCudnnTf32 : 0u) | (o.matmul_allow_tf32 ? kMatmulTf32 : 0u) |
         (o.cudnn_sdp ? kCudnnSdp : 0u);
}

std::atomic<uint32_t>& word() {
  static std::atomic<uint32_t> bits{pack(GpuMathOptions{})};
  return bits;
}

}  // namespace

GpuMathOptions gpuMathOptions() {
  const uint32_t b = word().load(std::memory_order_acquire);
  GpuMathOptions o;
  o.cudnn_deterministic = (b & kDeterministic) != 0;
  o.cudnn_benchmark = (b & kBenchmark) != 0;
  o.cudnn_allow_tf32 = (b & kCudnnTf32) != 0;
  o.matmul_allow_tf32 = (b & kMatmulTf32) != 0;
  o.cudnn_sdp = (b & kCudnnSdp) != 0;
  return o;
}

void setGpuMathOptions(const GpuMathOptions& options) {
  word().store(pack(options), std::memory_order_release);
}

ScopedGpuMathOptions::ScopedGpuMathOptions(const GpuMathOptions& options) : previous_(gpuMathOptions()) {
  setGpuMathOptions(options);
}

ScopedGpuMathOptions::~ScopedGpuMathOptions() { setGpuMathOptions(previous_); }

}  // namespace lockstep::kernels
