// softmax / log-softmax forward and backward along one dim on a GPU. The dim is moved last: when
// that view of the operands and of the result (x's dense layout) is contiguous (the last dim of a
// contiguous tensor, the channels of a channels-last one) rows are read and written in place;
// otherwise through row-major copies.
#include <limits>

#include "lockstep/kernels/cuda/block_reduce.cuh"
#include "lockstep/kernels/cuda/elementwise.cuh"
#include "lockstep/kernels/cuda/softmax.h"

namespace lockstep::kernels::cuda {

namespace {

template <int G, typename T>
__global__ void forwardRows(T* __restrict__ y, const T* __restrict__ x, int64_t m, int64_t c, bool log) {
  using A = ComputeT<T>;
  using R = RowGroup<G>;
  __shared__ A shm[32];
  const A lowest = -std::numeric_limits<A>::infinity();
  for (int64_t r = R::first(); r < m; r += R::stride()) {
    const T* row = x + r * c;
    A mx = lowest;
    for (int64_t j = R::lane(); j < c; j += R::width()) {
      const A v = castTo<A>(row[j]);
      mx = v > mx || v != v ? v : mx;
    }
    mx = R::max(mx, shm, lowest);
    A se = A(0);
    for (int64_t j = R::lane(); j < c; j += R::width()) se += dExp(castTo<A>(row[j]) - mx);
    se = R::sum(se, shm);
    const A lse = dLog(se), inv = A(1) / se;
    T* out = y + r * c;
    for (int64_t j = R::lane(); j < c; j += R::width()) {
      const A d = castTo<A>(row[j]) - mx;
      out[j] = castTo<T>(log ? d - lse : dExp(d) * inv);
    }
  }
}

template <int G, typename T>
__global__ void backwardRows(T* __restrict__ gx, const T* __restrict__ gy, const T* __restrict__ y, int64_t m,
                             int64_t c, bool log) {
  using A = ComputeT<T>;
  using R = RowGroup<G>;
  __shared__ A shm[32];
  for (int64_t r = R::first(); r < m; r += R::stride()) {
    const T *g = gy + r * c, *yr = y + r * c;
    A s = A(0);  // sum(gy * y) for softmax, sum(gy) for log-softmax
    for (int64_t j = R::lane(); j < c; j += R::width())
      s += log ? castTo<A>(g[j]) : castTo<A>(g[j]) * castTo<A>(yr[j]);
    s = R::sum(s, shm);
    T* out = gx + r * c;
    for (int64_t j = R::lane(); j < c; j += R::width()) {
      const A gv = castTo<A>(g[j]), yv = castTo<A>(yr[j]);
      out[j] = castTo<T>(log ? gv - dExp(yv) * s : yv * (gv - s));
    }
  }
}

// The permutation that moves dim last.
Shape dimLast(int64_t ndim, int64_t dim) {
  Shape perm;
  for (int64_t d = 0; d < ndim; ++d)
    if (d != dim) perm.push_back(d);
  if (ndim > 0) perm.push_back(dim);  // a 0-d tensor is one row of one element
  return perm;
}

// Runs launch(out_rows, in_rows...) on [m, c] row-major buffers and returns the result in the
// dense layout of like.
template <typename Launch>
Tensor byRows(const Tensor& like, int64_t dim, std::initializer_list<Tensor> inputs, Launch&& launch) {
  Tensor out = Tensor::emptyLike(like);
  if (out.numel() == 0) return out;
  const Shape perm = dimLast(like.dim(), dim);
  std::vector<Tensor> rows;
  bool in_place = out.permute(perm).isContiguous();
  for (const Tensor& t : inputs) {
    rows.push_back(t.permute(perm));
    in_place = in_place && rows.back().isContiguous();
  }
  const int64_t c = like.dim() == 0 ? 1 : like.size(dim);
  const int64_t m = like.numel() / c;
  if (in_place) {
    launch(out, rows, m, c);
    return out;
  }
  for (Tensor& r : rows) r = r.contiguous();
  Tensor tmp = Tensor::empty(rows[0].shape(), like.dtype(), MemoryFormat::contiguous, like.device());
  launch(tmp, rows, m, c);
  out.permute(perm).copyFrom(tmp);
  return out;
}

}  // namespace

Tensor softmaxForward(const Tensor& x, int64_t dim, bool log) {
  return byRows(x, dim, {x}, [&](Tensor& out, const std::vector<Tensor>& in, int64_t m, int64_t c) {
    visitFloating(log ? "log_softmax" : "softmax", x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* y = static_cast<T*>(out.devicePtr());
      const T* px = static_cast<const T*>(in[0].devicePtr());
      launchRowGroups(
          m, c, streamOf(x),
          [&](unsigned blocks, cudaStream_t s) {
            forwardRows<32, T><<<blocks, kBlock, 0, s>>>(y, px, m, c, log);
          },
          [&](unsigned blocks, cudaStream_t s) {
            forwardRows<0, T><<<blocks, kBlock, 0, s>>>(y, px, m, c, log);
          });
    });
  });
}

Tensor softmaxBackward(const Tensor& gy, const Tensor& y, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  checkSameDevice(name, gy, y);
  const Tensor g = gy.dtype() == y.dtype() ? gy : gy.to(y.dtype());
  return byRows(y, dim, {g, y}, [&](Tensor& out, const std::vector<Tensor>& in, int64_t m, int64_t c) {
    visitFloating(name, y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* gx = static_cast<T*>(out.devicePtr());
      const T* pg = static_cast<const T*>(in[0].devicePtr());
      const T* py = static_cast<const T*>(in[1].devicePtr());
      launchRowGroups(
          m, c, streamOf(y),
          [&](unsigned b, cudaStream_t s) {
            backwardRows<32, T><<<b, kBlock, 0, s>>>(gx, pg, py, m, c, log);
          },
          [&](unsigned b, cudaStream_t s) {
            backwardRows<0, T><<<b, kBlock, 0, s>>>(gx, pg, py, m, c, log);
          });
    });
  });
}

}  // namespace lockstep::kernels::cuda
