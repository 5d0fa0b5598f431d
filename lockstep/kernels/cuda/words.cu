// kernels/cuda/words.h: the values travel in the kernel's parameters (no pinned staging buffer, no
// event to wait for before the host reuses it).
#include <algorithm>

#include "lockstep/kernels/cuda/words.h"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::kernels::cuda {

namespace {

constexpr int kWordsPerLaunch = 64;
struct WordBatch {
  uint64_t value[kWordsPerLaunch];
};

__global__ void setWords(uint64_t* __restrict__ dst, WordBatch batch, int n) {
  if (static_cast<int>(threadIdx.x) < n) dst[threadIdx.x] = batch.value[threadIdx.x];
}

}  // namespace

void writeWords(uint64_t* dst, std::span<const uint64_t> words, const Device& device) {
  ::lockstep::cuda::DeviceGuard guard(device.index);
  cudaStream_t stream = ::lockstep::cuda::currentStream(device.index).handle();
  for (size_t at = 0; at < words.size(); at += kWordsPerLaunch) {
    const int n = static_cast<int>(std::min<size_t>(kWordsPerLaunch, words.size() - at));
    WordBatch batch{};
    std::copy_n(words.begin() + static_cast<std::ptrdiff_t>(at), n, batch.value);
    setWords<<<1, kWordsPerLaunch, 0, stream>>>(dst + at, batch, n);
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace lockstep::kernels::cuda
