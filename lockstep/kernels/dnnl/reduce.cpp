// Sum/mean with oneDNN's reduction primitive, one per (op, input layout, reduced dims). oneDNN 2.6
// jits only reductions over trailing dims; for the others (e.g. a bias gradient, [N, C] -> [1, C])
// its reference implementation strides across memory, so we run our own loop that reads the input
// once in memory order and accumulates into the (broadcast) output.
#include "lockstep/kernels/reduce.h"

#include <algorithm>
#include <dnnl.hpp>
#include <limits>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/tables/reduce.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/tensor/strided.h"

namespace lockstep::kernels::onednn {

namespace {

// y (zero-filled, x's rank, size 1 along reduced dims) += x summed over the reduced dims.
template <typename T>
void accumulate(const Tensor& y, const Tensor& x0) {
  // Read x in its memory order (x is dense): permute both so that x's strides descend.
  std::vector<int64_t> order(static_cast<size_t>(x0.dim()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t p, int64_t q) { return x0.stride(p) > x0.stride(q); });
  Tensor x = x0.permute(order);
  Tensor acc = y.expand(x0.shape()).permute(order);  // stride 0 along reduced dims: the loop sums into them
  T* py = static_cast<T*>(acc.dataPtr());
  const T* px = static_cast<const T*>(x.dataPtr());
  forEachRun<2>(x.shape(), {&acc.strides(), &x.strides()},
                [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                  T* d = py + off[0];
                  const T* s = px + off[1];
                  if (st[0] == 1 && st[1] == 1) {
#pragma omp simd
                    for (int64_t i = 0; i < n; ++i) d[i] += s[i];
                  } else if (st[0] == 0 && st[1] == 1) {
                    T sum = 0;
#pragma omp simd reduction(+ : sum)
                    for (int64_t i = 0; i < n; ++i) sum += s[i];
                    *d += sum;
                  } else {
                    for (int64_t i = 0; i < n; ++i) d[i * st[0]] += s[i * st[1]];
                  }
                });
}

// Threads split a kept (not reduced) dim, so each owns distinct output elements.
template <typename T>
void accumulateParallel(const Tensor& y, const Tensor& x, const std::vector<bool>& mask) {
  constexpr int64_t kGrain = 1 << 15;
  int64_t d = -1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (!mask[i] && x.size(i) > 1 && (d < 0 || x.size(i) > x.size(d))) d = i;
  }
  const int64_t chunks = d < 0 ? 1 : std::min<int64_t>({x.size(d), numThreads(), x.numel() / kGrain});
  if (chunks <= 1) {
    accumulate<T>(y, x);
    return;
  }
  const int64_t len = x.size(d);
#pragma omp parallel for num_threads(static_cast <int>(chunks))
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t begin = len * c / chunks, end = len * (c + 1) / chunks;
    accumulate<T>(y.narrow(d, begin, end - begin), x.narrow(d, begin, end - begin));
  }
}

bool loopReduce(const Tensor& y, const Tensor& x, const std::vector<bool>& mask) {
  switch (x.dtype()) {
    case DType::f32:
      accumulateParallel<float>(y, x, mask);
      return true;
    case DType::f64:
      accumulateParallel<double>(y, x, mask);
      return true;
    case DType::i32:
      accumulateParallel<int32_t>(y, x, mask);
      return true;
    case DType::i64:
      accumulateParallel<int64_t>(y, x, mask);
      return true;
    default:
      return false;
  }
}

}  // namespace

Tensor reduce(ReduceOp op, const Tensor& x0, const std::vector<int64_t>& dims, bool keepdim) {
  const char* name = op == ReduceOp::sum ? "sum" : "mean";
  std::vector<bool> mask = reducedMask(dims, x0.dim(), name);
  const Shape kept = reducedShape(x0.shape(), mask, /*keepdim=*/true);
  const Shape out = reducedShape(x0.shape(), mask, keepdim);
  // Nothing to reduce (no dims, or only size-1 dims): oneDNN rejects src == dst shapes.
  if (kept == x0.shape()) {
    Tensor copy = Tensor::empty(x0.shape(), x0.dtype());
    copy.copyFrom(x0);
    return copy.view(out);
  }
  if (x0.numel() == 0) {
    return Tensor::full(out, op == ReduceOp::sum ? 0.0 : std::numeric_limits<double>::quiet_NaN(),
                        x0.dtype());
  }
  Tensor x = x0.isDense() ? x0 : x0.contiguous();
  Tensor y = Tensor::empty(kept, x.dtype());
  struct Entry {
    bool usable = false;
    dnnl::reduction prim;
  };
  static PrimitiveCache<Entry> cache;
  try {
    const bool f32 = x.dtype() == DType::f32;
    auto xm = f32 ? memDesc(x) : dnnl::memory::desc(), ym = f32 ? memDesc(y) : dnnl::memory::desc();
    auto& e = cache.get(std::string(name) + keyOf(x) + shapeToString(kept), [&] {
      Entry entry;
      if (!f32) return entry;
      auto alg = op == ReduceOp::sum ? dnnl::algorithm::reduction_sum : dnnl::algorithm::reduction_mean;
      auto pd = dnnl::reduction::primitive_desc(dnnl::reduction::desc(alg, xm, ym, 0.f, 0.f), attributes(),
                                                engine());
      entry.usable = std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
      if (entry.usable) entry.prim = dnnl::reduction(pd);
      return entry;
    });
    if (e.usable) {
      execute(e.prim, {{DNNL_ARG_SRC, memory(xm, x)}, {DNNL_ARG_DST, memory(ym, y)}});
      stream().wait();
      return y.view(out);
    }
  } catch (const dnnl::error& err) {
    rethrow(err, name);
  }
  y.zero();
  if (!loopReduce(y, x, mask)) {
    // bf16, f16 and u8 accumulate in f32.
    Tensor y32 = Tensor::zeros(kept, DType::f32);
    loopReduce(y32, x.to(DType::f32), mask);
    y.copyFrom(y32);
  }
  if (op == ReduceOp::mean) {
    const double scale = static_cast<double>(y.numel()) / static_cast<double>(x.numel());
    visitDType(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        T* p = y.data<T>();
        for (int64_t i = 0; i < y.numel(); ++i) p[i] = static_cast<T>(p[i] * scale);
      } else {
        Tensor y32 = y.to(DType::f32);
        float* p = y32.data<float>();
        for (int64_t i = 0; i < y.numel(); ++i) p[i] = static_cast<float>(p[i] * scale);
        y.copyFrom(y32);
      }
    });
  }
  return y.view(out);
}

const ReduceKernels kReduce{LOCKSTEP_REDUCE_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::onednn
