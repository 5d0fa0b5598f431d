// Broadcasting arithmetic: oneDNN's binary primitive (which broadcasts only its second operand)
// when a jitted implementation exists for the operands' layouts; otherwise our own strided loop,
// which handles every broadcast and stride pattern and any float dtype.
#include "lockstep/kernels/binary.h"

#include <omp.h>

#include <algorithm>
#include <dnnl.hpp>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/kernels/tables/binary.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/tensor/convert.h"
#include "lockstep/tensor/strided.h"

namespace lockstep::kernels::onednn {

namespace {

dnnl::algorithm algorithmOf(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return dnnl::algorithm::binary_add;
    case BinaryOp::sub:
      return dnnl::algorithm::binary_sub;
    case BinaryOp::mul:
      return dnnl::algorithm::binary_mul;
    case BinaryOp::div:
      return dnnl::algorithm::binary_div;
  }
  return dnnl::algorithm::binary_add;
}

template <typename T>
inline T applyOp(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::add:
      return x + y;
    case BinaryOp::sub:
      return x - y;
    case BinaryOp::mul:
      return x * y;
    case BinaryOp::div:
      return x / y;
  }
  return x;
}

// One run of n elements; the common stride patterns get their own loops so they vectorise.
template <typename T, BinaryOp kOp>
void runLoop(T* y, const T* a, const T* b, int64_t n, int64_t sy, int64_t sa, int64_t sb) {
  if (sy == 1 && sa == 1 && sb == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = applyOp(kOp, a[i], b[i]);
  } else if (sy == 1 && sa == 1 && sb == 0) {
    const T bv = *b;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = applyOp(kOp, a[i], bv);
  } else if (sy == 1 && sa == 0 && sb == 1) {
    const T av = *a;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = applyOp(kOp, av, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i * sy] = applyOp(kOp, a[i * sa], b[i * sb]);
  }
}

template <typename T, BinaryOp kOp>
void stridedTyped(const Tensor& y, const Tensor& a, const Tensor& b) {
  T* py = static_cast<T*>(y.dataPtr());
  const T* pa = static_cast<const T*>(a.dataPtr());
  const T* pb = static_cast<const T*>(b.dataPtr());
  forEachRun<3>(y.shape(), {&y.strides(), &a.strides(), &b.strides()},
                [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
                  runLoop<T, kOp>(py + off[0], pa + off[1], pb + off[2], n, st[0], st[1], st[2]);
                });
}

template <typename T>
void stridedDispatch(BinaryOp op, const Tensor& y, const Tensor& a, const Tensor& b) {
  switch (op) {
    case BinaryOp::add:
      stridedTyped<T, BinaryOp::add>(y, a, b);
      break;
    case BinaryOp::sub:
      stridedTyped<T, BinaryOp::sub>(y, a, b);
      break;
    case BinaryOp::mul:
      stridedTyped<T, BinaryOp::mul>(y, a, b);
      break;
    case BinaryOp::div:
      stridedTyped<T, BinaryOp::div>(y, a, b);
      break;
  }
}

// An operand whose last two dims are transposed relative to y (unit stride on the second-to-last
// dim) would be read one element per cache line and page; 32x32 tiles keep its lines in cache.
template <typename T>
void stridedTiled(BinaryOp op, const Tensor& y, const Tensor& a, const Tensor& b) {
  constexpr int64_t kTile = 32;
  const int64_t r = y.dim() - 2, c = y.dim() - 1;
  auto crosses = [&](const Tensor& t) { return t.stride(c) > 1 && t.stride(r) == 1; };
  if (y.dim() < 2 || !(crosses(a) || crosses(b)) || y.size(r) <= kTile || y.size(c) <= kTile) {
    stridedDispatch<T>(op, y, a, b);
    return;
  }
  for (int64_t i = 0; i < y.size(r); i += kTile) {
    const int64_t li = std::min(kTile, y.size(r) - i);
    Tensor yr = y.narrow(r, i, li), ar = a.narrow(r, i, li), br = b.narrow(r, i, li);
    for (int64_t j = 0; j < y.size(c); j += kTile) {
      const int64_t lj = std::min(kTile, y.size(c) - j);
      stridedDispatch<T>(op, yr.narrow(c, j, lj), ar.narrow(c, j, lj), br.narrow(c, j, lj));
    }
  }
}

// y = a op b where a and b are already expanded to y's shape (stride 0 along broadcast dims).
// Large outputs are split along their longest-stride dim across threads.
template <typename T>
void stridedParallel(BinaryOp op, const Tensor& y, const Tensor& a, const Tensor& b) {
  constexpr int64_t kGrain = 1 << 15;
  const int threads = numThreads();
  if (y.numel() < 2 * kGrain || threads == 1 || y.dim() == 0) {
    stridedTiled<T>(op, y, a, b);
    return;
  }
  int64_t d = 0;
  for (int64_t i = 1; i < y.dim(); ++i) {
    if (y.size(i) > 1 && (y.size(d) <= 1 || y.stride(i) > y.stride(d))) d = i;
  }
  const int64_t len = y.size(d);
  const int64_t chunks = std::min<int64_t>({len, threads, y.numel() / kGrain});
  if (chunks <= 1) {
    stridedTiled<T>(op, y, a, b);
    return;
  }
#pragma omp parallel for num_threads(static_cast <int>(chunks))
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t begin = len * c / chunks, end = len * (c + 1) / chunks;
    stridedTiled<T>(op, y.narrow(d, begin, end - begin), a.narrow(d, begin, end - begin),
                    b.narrow(d, begin, end - begin));
  }
}

void strided(BinaryOp op, const Tensor& y0, const Tensor& a0, const Tensor& b0) {
  // Walk in y's memory order (y is dense): permute every operand so that y's strides descend. A
  // transposed operand is then read, not written, across memory.
  std::vector<int64_t> order(static_cast<size_t>(y0.dim()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t p, int64_t q) { return y0.stride(p) > y0.stride(q); });
  Tensor y = y0.permute(order), a = a0.permute(order), b = b0.permute(order);
  switch (y.dtype()) {
    case DType::f32:
      stridedParallel<float>(op, y, a, b);
      break;
    case DType::f64:
      stridedParallel<double>(op, y, a, b);
      break;
    case DType::i32:
      stridedParallel<int32_t>(op, y, a, b);
      break;
    case DType::i64:
      stridedParallel<int64_t>(op, y, a, b);
      break;
    default: {
      // bf16, f16 and u8 compute in f32.
      Tensor y32 = Tensor::empty(y.shape(), DType::f32);
      stridedParallel<float>(op, y32, a.to(DType::f32), b.to(DType::f32));
      Tensor(y).copyFrom(y32);
    }
  }
}

// Pads to rank n with leading size-1 dims (a view).
Tensor padRank(const Tensor& t, size_t n) {
  Tensor r = t;
  while (static_cast<size_t>(r.dim()) < n) r = r.unsqueeze(0);
  return r;
}

// Whether oneDNN can compute y = a op b here (a has y's shape; b broadcasts). oneDNN's reference
// implementation is slower than our loop, so a primitive whose implementation is "ref" is not used.
bool tryOnednn(BinaryOp op, const Tensor& y, const Tensor& a, const Tensor& b) {
  if (y.dtype() != DType::f32 || !a.isDense() || !b.isDense()) return false;
  struct Entry {
    bool usable = false;
    dnnl::binary prim;
  };
  static PrimitiveCache<Entry> cache;
  auto ya = memDesc(y), am = memDesc(a), bm = memDesc(b);
  try {
    auto& e = cache.get(std::string(binaryOpName(op)) + keyOf(y) + keyOf(a) + keyOf(b), [&] {
      Entry entry;
      auto pd = dnnl::binary::primitive_desc(dnnl::binary::desc(algorithmOf(op), am, bm, ya), attributes(),
                                             engine());
      entry.usable = std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
      if (entry.usable) entry.prim = dnnl::binary(pd);
      return entry;
    });
    if (!e.usable) return false;
    execute(
        e.prim,
        {{DNNL_ARG_SRC_0, memory(am, a)}, {DNNL_ARG_SRC_1, memory(bm, b)}, {DNNL_ARG_DST, memory(ya, y)}});
    stream().wait();
  } catch (const dnnl::error& err) {
    rethrow(err, binaryOpName(op));
  }
  return true;
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a0, const Tensor& b0) {
  Shape out = checkBinary(op, a0, b0);
  Tensor a = padRank(a0, out.size()), b = padRank(b0, out.size());
  // Keep the layout of an operand that already has the result's shape (e.g. channels_last).
  Tensor y = a.shape() == out && a.isDense()   ? Tensor::emptyLike(a)
             : b.shape() == out && b.isDense() ? Tensor::emptyLike(b)
                                               : Tensor::empty(out, a.dtype());
  if (y.numel() == 0) return y;
  const bool commutes = op == BinaryOp::add || op == BinaryOp::mul;
  bool done = false;
  if (a.shape() == out) {
    done = tryOnednn(op, y, a, b);
  } else if (commutes && b.shape() == out) {
    done = tryOnednn(op, y, b, a);
  }
  if (!done) strided(op, y, a.expand(out), b.expand(out));
  return y;
}

Tensor binaryScalar(BinaryOp op, const Tensor& a0, double s) {
  checkDivisible(op, a0);
  Tensor a = a0.isDense() ? a0 : a0.contiguous();
  Tensor y = Tensor::emptyLike(a);
  if (y.numel() == 0) return y;
  if (a.dtype() != DType::f32) {
    Tensor sv = Tensor::scalar(s, a.dtype());
    strided(op, y, a, sv.expand(a.shape()));
    return y;
  }
  // A dense tensor is a flat buffer here, and the scalar is a runtime operand: one primitive per
  // element count serves every scalar value.
  static PrimitiveCache<dnnl::binary> cache;
  auto md = dnnl::memory::desc({a.numel()}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  auto sm = dnnl::memory::desc({1}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  float sv = static_cast<float>(s);
  try {
    auto& prim = cache.get(std::string(binaryOpName(op)) + std::to_string(a.numel()), [&] {
      return dnnl::binary(dnnl::binary::primitive_desc(dnnl::binary::desc(algorithmOf(op), md, sm, md),
                                                       attributes(), engine()));
    });
    execute(prim, {{DNNL_ARG_SRC_0, memory(md, a)},
                   {DNNL_ARG_SRC_1, dnnl::memory(sm, engine(), &sv)},
                   {DNNL_ARG_DST, memory(md, y)}});
    stream().wait();
  } catch (const dnnl::error& err) {
    rethrow(err, binaryOpName(op));
  }
  return y;
}

namespace {

// y = w op n (or n op w when the narrow operand is the first) over one flat run of a dense layout,
// the narrow operand widened a block at a time into a buffer that stays in cache.
template <BinaryOp kOp>
void mixedRuns(float* y, const float* w, const uint16_t* n, int64_t count, bool narrow_first, DType narrow) {
  constexpr int64_t kBlock = 1024;
  const int64_t blocks = (count + kBlock - 1) / kBlock;
  const int threads = static_cast<int>(std::min<int64_t>(numThreads(), std::max<int64_t>(1, count >> 16)));
#pragma omp parallel for num_threads(threads) if (threads > 1)
  for (int64_t k = 0; k < blocks; ++k) {
    alignas(64) float buf[kBlock];
    const int64_t i0 = k * kBlock, len = std::min(kBlock, count - i0);
    if (narrow == DType::bf16) {
      convertBF16ToF32(n + i0, buf, len);
    } else {
      convertF16ToF32(n + i0, buf, len);
    }
    float* yo = y + i0;
    const float* wo = w + i0;
    if (narrow_first) {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) yo[i] = applyOp(kOp, buf[i], wo[i]);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) yo[i] = applyOp(kOp, wo[i], buf[i]);
    }
  }
}

}  // namespace

Tensor binaryMixed(BinaryOp op, const Tensor& a, const Tensor& b) {
  const bool narrow_first = a.dtype() != DType::f32;
  const Tensor& wide = narrow_first ? b : a;
  const Tensor& narrow = narrow_first ? a : b;
  Tensor y = Tensor::emptyStrided(wide.shape(), wide.strides(), DType::f32, wide.device());
  if (y.numel() == 0) return y;
  auto* py = static_cast<float*>(y.dataPtr());
  const auto* pw = static_cast<const float*>(wide.dataPtr());
  const auto* pn = static_cast<const uint16_t*>(narrow.dataPtr());
  const int64_t n = y.numel();
  switch (op) {
    case BinaryOp::add:
      mixedRuns<BinaryOp::add>(py, pw, pn, n, narrow_first, narrow.dtype());
      break;
    case BinaryOp::sub:
      mixedRuns<BinaryOp::sub>(py, pw, pn, n, narrow_first, narrow.dtype());
      break;
    case BinaryOp::mul:
      mixedRuns<BinaryOp::mul>(py, pw, pn, n, narrow_first, narrow.dtype());
      break;
    case BinaryOp::div:
      mixedRuns<BinaryOp::div>(py, pw, pn, n, narrow_first, narrow.dtype());
      break;
  }
  return y;
}

const BinaryKernels kBinary{LOCKSTEP_BINARY_OPS(LOCKSTEP_KERNEL_ENTRY)};

}  // namespace lockstep::kernels::onednn
