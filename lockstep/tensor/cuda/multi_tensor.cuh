#pragma once
// Multi-tensor apply (.cu files only), as torch's _foreach ops and fused optimizers and apex's
// multi_tensor_apply: one launch walks many flat spans, each block one chunk of one span, the spans'
// pointers travelling in the kernel's parameters. An op is a functor with
//   static constexpr int kBuffers;           // pointers per span
//   struct Values; Values load() const;       // per-thread constants, loaded once
//   void operator()(const Values&, void* const* bufs, int64_t i) const;  // element i of a span
// Used by the optimizers' updates (kernels/cuda/optimizer.cu) and Tensor::copyMany's casts.
#include <array>
#include <cstddef>
#include <cstdint>

#include "lockstep/tensor/cuda/device_types.cuh"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::cuda {

// Small chunks and many blocks per launch: a block's threads walk kMultiChunk / 256 = 16 elements
// each, so a ResNet's 11M parameters are ~2,700 blocks that fill the GPU (with 64Ki-element chunks
// they were 170 blocks of 256 serial steps per thread, and SGD ran at a tenth of the memory's speed).
constexpr int kMaxSpans = 96;
constexpr int kMaxBlocks = 4096;
constexpr int64_t kMultiChunk = 4096;  // elements per block

// Up to kMaxSpans spans and kMaxBlocks (span, chunk) work items, passed by value: ~25 KiB, within
// the 32,764 bytes CUDA 12.1+ allows kernel parameters on Volta and later.
template <int K>
struct SpanList {
  void* buf[kMaxSpans][K];
  int64_t numel[kMaxSpans];
  uint8_t span_of_block[kMaxBlocks];
  int32_t chunk_of_block[kMaxBlocks];
};

static_assert(kMaxSpans <= 256, "span_of_block holds a span's index in 8 bits");
static_assert(sizeof(SpanList<5>) <= 32764, "kernel parameters are at most 32,764 bytes");

template <typename Op>
__global__ void applyMany(Op op, SpanList<Op::kBuffers> list) {
  static_assert(sizeof(Op) + sizeof(SpanList<Op::kBuffers>) <= 32764,
                "an op and its span list are at most 32,764 bytes of kernel parameters");
  const int s = list.span_of_block[blockIdx.x];
  const int64_t begin = int64_t(list.chunk_of_block[blockIdx.x]) * kMultiChunk;
  const int64_t end = min(list.numel[s], begin + kMultiChunk);
  const typename Op::Values c = op.load();
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) op(c, list.buf[s], i);
}

/// One span of a multi-tensor launch: its K pointers and element count (0: skipped).
template <int K>
struct SpanRef {
  std::array<void*, K> bufs{};
  int64_t numel = 0;
};

/// Applies op to spans span_at(0) .. span_at(count - 1) on stream (the caller holds the device),
/// filling SpanLists and launching each when its spans or blocks run out.
template <typename Op, typename SpanAt>
void launchMany(const Op& op, cudaStream_t stream, size_t count, SpanAt&& span_at) {
  constexpr int K = Op::kBuffers;
  SpanList<K> list{};
  int nspans = 0, nblocks = 0;
  auto flush = [&] {
    if (nblocks > 0) {
      applyMany<Op><<<nblocks, kBlock, 0, stream>>>(op, list);
      LOCKSTEP_CUDA_CHECK(cudaGetLastError());
    }
    nspans = nblocks = 0;
  };
  for (size_t i = 0; i < count; ++i) {
    const SpanRef<K> s = span_at(i);
    if (s.numel == 0) continue;
    const int64_t chunks = (s.numel + kMultiChunk - 1) / kMultiChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || nspans == 0) {
        if (nspans == kMaxSpans) flush();
        for (int k = 0; k < K; ++k) list.buf[nspans][k] = s.bufs[k];
        list.numel[nspans] = s.numel;
        ++nspans;
      }
      list.span_of_block[nblocks] = static_cast<uint8_t>(nspans - 1);
      list.chunk_of_block[nblocks] = static_cast<int32_t>(c);
      if (++nblocks == kMaxBlocks) flush();
    }
  }
  flush();
}

}  // namespace lockstep::cuda
