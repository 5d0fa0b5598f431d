// Sum and mean over dims on a GPU. x is brought to a [M kept, K reduced] row-major layout (a
// permuted contiguous copy unless it already is one) and each row is reduced by a warp, a block or,
// for few long rows, by blocks writing partial sums that a second pass adds. A contiguous x reduced
// over leading dims ([K, M], M >= 32: bias gradients) is summed down its columns in place.
#include <limits>

#include "lockstep/kernels/cuda/block_reduce.cuh"
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/reduce.h"

namespace lockstep::kernels::cuda {

namespace {

/// Accumulator of T: f32 for f32/bf16/f16, f64 for f64, i64 for integers.
template <typename T>
using AccT = std::conditional_t<std::is_integral_v<T>, int64_t, ComputeT<T>>;

// One warp per row, 8 rows per block.
template <typename In, typename Out, typename A>
__global__ void rowsByWarp(Out* __restrict__ out, const In* __restrict__ x, int64_t m, int64_t k, A divisor) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; r < m; r += warps) {
    const In* row = x + r * k;
    A acc = A(0);
    for (int64_t i = lane; i < k; i += 32) acc += castTo<A>(row[i]);
    acc = warpSum(acc);
    if (lane == 0) out[r] = castTo<Out>(acc / divisor);
  }
}

// One block per row.
template <typename In, typename Out, typename A>
__global__ void rowsByBlock(Out* __restrict__ out, const In* __restrict__ x, int64_t m, int64_t k,
                            A divisor) {
  __shared__ A shm[32];
  for (int64_t r = blockIdx.x; r < m; r += gridDim.x) {
    const In* row = x + r * k;
    A acc = A(0);
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) acc += castTo<A>(row[i]);
    acc = blockSum(acc, shm);
    if (threadIdx.x == 0) out[r] = castTo<Out>(acc / divisor);
  }
}

// Block (c, r) sums chunk c of row r into partial[r * chunks + c].
template <typename In, typename A>
__global__ void rowChunks(A* __restrict__ partial, const In* __restrict__ x, int64_t k, int64_t chunk) {
  __shared__ A shm[32];
  const int64_t r = blockIdx.y, c = blockIdx.x;
  const In* row = x + r * k;
  const int64_t end = min(k, (c + 1) * chunk);
  A acc = A(0);
  for (int64_t i = c * chunk + threadIdx.x; i < end; i += blockDim.x) acc += castTo<A>(row[i]);
  acc = blockSum(acc, shm);
  if (threadIdx.x == 0) partial[r * gridDim.x + c] = acc;
}

// Column sums of a row-major [k, m]: block (x, y) of 32 x 8 threads adds rows [y * rows_per, +rows_per)
// of columns [32 x, +32), 8 rows at a time (coalesced), and writes out[y * m + column].
template <typename In, typename Out, typename A>
__global__ void columnTiles(Out* __restrict__ out, const In* __restrict__ x, int64_t k, int64_t m,
                            int64_t rows_per, A divisor) {
  __shared__ A tile[8][33];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  const int64_t j = blockIdx.x * int64_t(32) + tx;
  const int64_t r0 = blockIdx.y * rows_per, r1 = min(k, r0 + rows_per);
  A acc = A(0);
  if (j < m) {
    for (int64_t i = r0 + ty; i < r1; i += 8) acc += castTo<A>(x[i * m + j]);
  }
  tile[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && j < m) {
    for (int t = 1; t < 8; ++t) acc += tile[t][tx];
    out[blockIdx.y * m + j] = castTo<Out>(acc / divisor);
  }
}

constexpr int64_t kWarpRowMax = 1024;  // longer rows get a block (or chunks) each
constexpr int64_t kChunk = 16384;      // elements per partial-sum block
constexpr int64_t kManyRows = 512;     // enough rows to fill the GPU one block per row
constexpr int64_t kMinColumns = 32;    // fewer columns leave the column kernel's warps idle
constexpr int64_t kFillBlocks = 512;   // blocks that keep an H100's 132 SMs busy

// Column sums of a row-major [k, m]; with few column tiles the rows are split across blocks whose
// partial sums [splits, m] are then summed the same way.
template <typename In, typename Out, typename A>
void reduceColumns(Out* out, const In* x, int64_t k, int64_t m, A divisor, const Tensor& like,
                   cudaStream_t stream) {
  const int64_t tiles = (m + 31) / 32;
  int64_t splits = std::min<int64_t>({(k + 255) / 256, std::max<int64_t>(1, kFillBlocks / tiles), 65535});
  if (splits <= 1) {
    columnTiles<In, Out, A>
        <<<dim3(static_cast<unsigned>(tiles), 1), kBlock, 0, stream>>>(out, x, k, m, k, divisor);
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int64_t rows_per = (k + splits - 1) / splits;
  splits = (k + rows_per - 1) / rows_per;
  Tensor partial = Tensor::empty({splits, m}, dtypeOf<A>, MemoryFormat::contiguous, like.device());
  A* p = static_cast<A*>(partial.devicePtr());
  columnTiles<In, A, A>
      <<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits)), kBlock, 0, stream>>>(
          p, x, k, m, rows_per, A(1));
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
  reduceColumns<A, Out, A>(out, p, splits, m, divisor, like, stream);
}

template <typename In, typename Out, typename A>
void reduceRows(Out* out, const In* x, int64_t m, int64_t k, A divisor, const Tensor& like,
                cudaStream_t stream) {
  if (k <= kWarpRowMax) {
    rowsByWarp<In, Out, A><<<blocksFor(m * 32), kBlock, 0, stream>>>(out, x, m, k, divisor);
  } else if (m >= kManyRows || k <= 2 * kChunk) {
    rowsByBlock<In, Out, A>
        <<<static_cast<unsigned>(std::min<int64_t>(m, 65535)), kBlock, 0, stream>>>(out, x, m, k, divisor);
  } else {
    const int64_t chunks = (k + kChunk - 1) / kChunk;
    Tensor partial = Tensor::empty({m, chunks}, dtypeOf<A>, MemoryFormat::contiguous, like.device());
    A* p = static_cast<A*>(partial.devicePtr());
    rowChunks<In, A><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(m)), kBlock, 0, stream>>>(
        p, x, k, kChunk);
    LOCKSTEP_CUDA_CHECK(cudaGetLastError());
    reduceRows<A, Out, A>(out, p, m, chunks, divisor, like, stream);
    return;  // `partial` goes back to the stream-ordered allocator: reused only by later work on this stream
  }
  LOCKSTEP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const char* name = op == ReduceOp::sum ? "sum" : "mean";
  const std::vector<bool> mask = reducedMask(dims, x.dim(), name);
  Tensor y =
      Tensor::empty(reducedShape(x.shape(), mask, keepdim), x.dtype(), MemoryFormat::contiguous, x.device());
  const int64_t m = y.numel();
  if (m == 0) return y;
  const int64_t k = x.numel() / m;
  if (k == 0) {
    y.fill(op == ReduceOp::sum ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    return y;
  }
  // Kept dims first, reduced dims last; is the reduced block a prefix of a contiguous x?
  Shape perm;
  bool reduced_leading = true, seen_kept = false;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[d])
      perm.push_back(d), seen_kept = true;
    else if (seen_kept)
      reduced_leading = false;
  }
  for (int64_t d = 0; d < x.dim(); ++d)
    if (mask[d]) perm.push_back(d);
  cudaStream_t stream = streamOf(x);
  visitDeviceType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = AccT<T>;
    const A divisor = op == ReduceOp::mean ? static_cast<A>(k) : A(1);
    T* out = static_cast<T*>(y.devicePtr());
    if (reduced_leading && x.isContiguous() && m >= kMinColumns) {
      reduceColumns<T, T, A>(out, static_cast<const T*>(x.devicePtr()), k, m, divisor, x, stream);
      return;
    }
    const Tensor rows = x.permute(perm).contiguous();
    reduceRows<T, T, A>(out, static_cast<const T*>(rows.devicePtr()), m, k, divisor, x, stream);
  });
  return y;
}

}  // namespace lockstep::kernels::cuda
