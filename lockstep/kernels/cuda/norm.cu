// Norms of many tensors and clipping by them on a GPU (kernels/norm.h), in multi-tensor launches as
// optimizer.cu's: each block takes one fixed chunk of one tensor and the tensors' pointers travel in
// the kernel's parameters. The joint norm takes three passes, each in an order fixed by the sizes
// alone (so a run repeats bitwise): chunk partial sums, each tensor's partials summed by one block
// into its norm, and the norms combined by one block. The clip kernels read that norm on the device.
#include <cmath>
#include <type_traits>

#include "lockstep/kernels/cuda/block_reduce.cuh"
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/norm.h"

namespace lockstep::kernels::cuda {

namespace {

constexpr int kMaxSpans = 32;
constexpr int kMaxBlocks = 320;
constexpr int64_t kChunk = 65536;  // elements per block of the chunk passes
constexpr int kMaxTensors = 256;   // tensors per launch of the per-tensor pass

enum class Elem : uint8_t { f32, f64, bf16, f16 };
// The p of the norm: 2 (the common case, without pow), infinity (the max) or any other.
enum class Mode { two, inf, general };

// Up to kMaxSpans dense tensors and kMaxBlocks (tensor, chunk) work items, passed by value (< 4 KiB).
struct SpanList {
  void* x[kMaxSpans];
  int64_t numel[kMaxSpans];
  Elem elem[kMaxSpans];
  uint8_t span_of_block[kMaxBlocks];
  int32_t chunk_of_block[kMaxBlocks];
};

// Chunk ranges of the partial sums: tensor t of a launch owns partials [first[t], first[t + 1]).
struct TensorChunks {
  int32_t first[kMaxTensors + 1];
};

// The larger of a and b, NaN when either is (torch's inf-norm; fmax would drop it).
__device__ __forceinline__ double maxKeepingNan(double a, double b) { return b > a || b != b ? b : a; }

// The accumulation of one element's |v|: the max and the sums carry NaN and inf along.
template <Mode M>
__device__ __forceinline__ double accumulate(double acc, double v, double p) {
  if constexpr (M == Mode::inf)
    return maxKeepingNan(acc, fabs(v));
  else if constexpr (M == Mode::two)
    return acc + v * v;
  else
    return acc + pow(fabs(v), p);
}

template <Mode M>
__device__ __forceinline__ double blockReduce(double v, double* shm) {
  if constexpr (M == Mode::inf)
    return blockMax(v, shm, 0.0);  // NaN wins there too
  else
    return blockSum(v, shm);
}

template <Mode M, typename T>
__device__ double chunkPower(const T* __restrict__ x, int64_t begin, int64_t end, double p) {
  double acc = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    acc = accumulate<M>(acc, castTo<double>(x[i]), p);
  return acc;
}

// partial[blockIdx.x] = the sum of |x|^p (or the max |x|) over the block's chunk.
template <Mode M>
__global__ void chunkPartials(SpanList list, double p, double* __restrict__ partial) {
  __shared__ double shm[32];
  const int s = list.span_of_block[blockIdx.x];
  const int64_t begin = int64_t(list.chunk_of_block[blockIdx.x]) * kChunk;
  const int64_t end = min(list.numel[s], begin + kChunk);
  const void* x = list.x[s];
  double acc;
  switch (list.elem[s]) {
    case Elem::f64:
      acc = chunkPower<M>(static_cast<const double*>(x), begin, end, p);
      break;
    case Elem::bf16:
      acc = chunkPower<M>(static_cast<const __nv_bfloat16*>(x), begin, end, p);
      break;
    case Elem::f16:
      acc = chunkPower<M>(static_cast<const __half*>(x), begin, end, p);
      break;
    default:
      acc = chunkPower<M>(static_cast<const float*>(x), begin, end, p);
  }
  acc = blockReduce<M>(acc, shm);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// norms[t] = tensor t's norm from its partials, summed in chunk order by block t.
template <Mode M>
__global__ void tensorNorms(const double* __restrict__ partial, TensorChunks chunks, double p,
                            double* __restrict__ norms) {
  __shared__ double shm[32];
  const int t = blockIdx.x;
  double acc = 0.0;
  for (int64_t g = chunks.first[t] + threadIdx.x; g < chunks.first[t + 1]; g += blockDim.x)
    acc = M == Mode::inf ? maxKeepingNan(acc, partial[g]) : acc + partial[g];
  acc = blockReduce<M>(acc, shm);
  if (threadIdx.x == 0) norms[t] = M == Mode::two ? sqrt(acc) : M == Mode::inf ? acc : pow(acc, 1.0 / p);
}

// total = the norm of the n norms (kernels::combineNorms on the device), by one block.
template <Mode M>
__global__ void jointNorm(const double* __restrict__ norms, int64_t n, double p, double* __restrict__ total) {
  __shared__ double shm[32];
  double acc = 0.0;
  for (int64_t t = threadIdx.x; t < n; t += blockDim.x) {
    const double v = norms[t];
    if constexpr (M == Mode::inf)
      acc = maxKeepingNan(acc, v);
    else if constexpr (M == Mode::two)
      acc += v * v;  // pow(v, 2) as the CPU's correctly rounded std::pow gives it
    else
      acc += pow(v, p);
  }
  acc = blockReduce<M>(acc, shm);
  if (threadIdx.x == 0) *total = M == Mode::two ? sqrt(acc) : M == Mode::inf ? acc : pow(acc, 1.0 / p);
}

template <typename T>
__device__ void scaleChunk(T* __restrict__ x, int64_t begin, int64_t end, double coef) {
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) x[i] = __dmul_rn(x[i], coef);
  } else {
    const float c = static_cast<float>(coef);  // the CPU's static_cast<T>(coef)
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      x[i] = castTo<T>(__fmul_rn(castTo<float>(x[i]), c));
  }
}

// x *= min(1, max_norm / (total + 1e-6)) over the block's chunk; nothing when that is 1.
__global__ void clipScale(SpanList list, const double* __restrict__ total, double max_norm) {
  const double raw = max_norm / (*total + 1e-6);
  const double coef = raw != raw ? raw : fmin(1.0, raw);  // NaN propagates (fmin would drop it)
  if (coef == 1.0) return;
  const int s = list.span_of_block[blockIdx.x];
  const int64_t begin = int64_t(list.chunk_of_block[blockIdx.x]) * kChunk;
  const int64_t end = min(list.numel[s], begin + kChunk);
  void* x = list.x[s];
  switch (list.elem[s]) {
    case Elem::f64:
      scaleChunk(static_cast<double*>(x), begin, end, coef);
      break;
    case Elem::bf16:
      scaleChunk(static_cast<__nv_bfloat16*>(x), begin, end, coef);
      break;
    case Elem::f16:
      scaleChunk(static_cast<__half*>(x), begin, end, coef);
      break;
    default:
      scaleChunk(static_cast<float*>(x), begin, end, coef);
  }
}

Elem elemOf(DType t, const char* op) {
  return visitFloating(op, t, [](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>)
      return Elem::f64;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>)
      return Elem::bf16;
    else if constexpr (std::is_same_v<T, __half>)
      return Elem::f16;
    else
      return Elem::f32;
  });
}

int64_t chunksOf(const Tensor& x) { return (x.numel() + kChunk - 1) / kChunk; }

// Calls launch(list, blocks) for consecutive batches of the (tensor, chunk) work items of the dense
// xs, in order: block b of a batch is work item (items before the batch) + b.
template <typename Launch>
void forEachChunkBatch(const std::vector<Tensor>& xs, const char* op, Launch&& launch) {
  SpanList list{};
  int nspans = 0, nblocks = 0;
  auto flush = [&] {
    if (nblocks > 0) launch(list, nblocks);
    nspans = nblocks = 0;
  };
  for (const Tensor& x : xs) {
    const int64_t chunks = chunksOf(x);
    for (int64_t c = 0; c < chunks; ++c) {
      if (c == 0 || nspans == 0) {
        if (nspans == kMaxSpans) flush();
        list.x[nspans] = x.devicePtr();
        list.numel[nspans] = x.numel();
        list.elem[nspans] = elemOf(x.dtype(), op);
        ++nspans;
      }
      list.span_of_block[nblocks] = static_cast<uint8_t>(nspans - 1);
      list.chunk_of_block[nblocks] = static_cast<int32_t>(c);
      if (++nblocks == kMaxBlocks) flush();
    }
  }
  flush();
}

template <typename Fn>
void withMode(double p, Fn&& fn) {
  if (std::isinf(p))
    fn(std::integral_constant<Mode, Mode::inf>{});
  else if (p == 2.0)
    fn(std::integral_constant<Mode, Mode::two>{});
  else
    fn(std::integral_constant<Mode, Mode::general>{});
}

}  // namespace

Tensor totalNorm(const std::vector<Tensor>& xs, double p) {
  const Tensor& like = xs.at(0);
  ::lockstep::cuda::DeviceGuard guard(like.device().index);
  cudaStream_t stream = streamOf(like);
  std::vector<Tensor> dense;
  dense.reserve(xs.size());
  int64_t total_chunks = 0;
  for (const Tensor& x : xs) {
    elemOf(x.dtype(), "totalNorm");  // a NotSupportedError before anything is queued
    dense.push_back(x.isDense() ? x : x.contiguous());
    total_chunks += chunksOf(x);
  }
  const int64_t n = static_cast<int64_t>(dense.size());
  Tensor partial = emptyOn({std::max<int64_t>(total_chunks, 1)}, DType::f64, like);
  Tensor norms = emptyOn({n}, DType::f64, like);
  Tensor total = emptyOn({}, DType::f64, like);
  auto* partial_p = static_cast<double*>(partial.devicePtr());
  auto* norms_p = static_cast<double*>(norms.devicePtr());
  withMode(p, [&](auto mode) {
    constexpr Mode M = decltype(mode)::value;
    int64_t done = 0;
    forEachChunkBatch(dense, "totalNorm", [&](const SpanList& list, int blocks) {
      chunkPartials<M><<<blocks, kBlock, 0, stream>>>(list, p, partial_p + done);
      LOCKSTEP_CUDA_CHECK(cudaGetLastError());
      done += blocks;
    });
    // Each tensor's partials, kMaxTensors tensors per launch.
    TensorChunks chunks{};
    int64_t first_tensor = 0, first_chunk = 0, chunk = 0;
    for (int64_t t = 0; t <= n; ++t) {
      const int count = static_cast<int>(t - first_tensor);
      if (t == n || count == kMaxTensors) {
        chunks.first[count] = static_cast<int32_t>(chunk - first_chunk);
        if (count > 0) {
          tensorNorms<M>
              <<<count, kBlock, 0, stream>>>(partial_p + first_chunk, chunks, p, norms_p + first_tensor);
          LOCKSTEP_CUDA_CHECK(cudaGetLastError());
        }
        if (t == n) break;
        first_tensor = t;
        first_chunk = chunk;
      }
      chunks.first[t - first_tensor] = static_cast<int32_t>(chunk - first_chunk);
      chunk += chunksOf(dense[t]);
    }
    jointNorm<M><<<1, kBlock, 0, stream>>>(norms_p, n, p, static_cast<double*>(total.devicePtr()));
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  });
  return total;  // the temporaries go back to the stream-ordered allocator, reused only after this work
}

void scaleByClipCoefficient(const std::vector<Tensor>& xs, const Tensor& total, double max_norm) {
  ::lockstep::cuda::DeviceGuard guard(total.device().index);
  cudaStream_t stream = streamOf(total);
  std::vector<Tensor> dense;
  dense.reserve(xs.size());
  for (const Tensor& x : xs) {
    elemOf(x.dtype(), "clipGradNorm");
    // Not dense: scaled in an f64 copy, then copied back (rounded once), as the host does it.
    dense.push_back(x.isDense() ? x : x.to(DType::f64).contiguous());
  }
  const auto* total_p = static_cast<const double*>(total.devicePtr());
  forEachChunkBatch(dense, "clipGradNorm", [&](const SpanList& list, int blocks) {
    clipScale<<<blocks, kBlock, 0, stream>>>(list, total_p, max_norm);
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  });
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!xs[i].isDense()) Tensor(xs[i]).copyFrom(dense[i]);
  }
}

}  // namespace lockstep::kernels::cuda
