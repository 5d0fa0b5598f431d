#include "lockstep/comm/reduce_op.h"

#include <algorithm>
#include <type_traits>

#include "lockstep/util/error.h"

namespace lockstep::comm {

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::product:
      return "product";
  }
  return "?";
}

namespace {

template <typename T>
struct Compute {
  using type = T;
};
template <>
struct Compute<BFloat16> {
  using type = float;
};
template <>
struct Compute<Half> {
  using type = float;
};

// The loops are written so GCC vectorises them at -O2 with the "cheap" cost model raised.
template <typename T, typename F>
__attribute__((optimize("O3"))) void apply(T* dst, const T* a, const T* b, size_t n, F f, T* copy) {
  using C = typename Compute<T>::type;
  if (copy != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      T v;
      if constexpr (std::is_same_v<C, T>)
        v = f(a[i], b[i]);
      else
        v = T(f(static_cast<C>(a[i]), static_cast<C>(b[i])));
      dst[i] = v;
      copy[i] = v;
    }
    return;
  }
  if constexpr (std::is_same_v<C, T>) {
    for (size_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = T(f(static_cast<C>(a[i]), static_cast<C>(b[i])));
  }
}

// x / d, or the same value as x * (1 / d) when d is a power of two (exact there, and much cheaper
// than a vector division): what divideBy and the fused divisor of reduceInto both compute.
template <typename C>
struct Divide {
  C d, inv;
  bool pow2;
  explicit Divide(int64_t divisor)
      : d(static_cast<C>(divisor)),
        inv(static_cast<C>(1) / static_cast<C>(divisor)),
        pow2(std::is_floating_point_v<C> && divisor > 0 && (divisor & (divisor - 1)) == 0) {}
};

template <typename T>
void reduceTyped(T* dst, const T* a, const T* b, size_t n, ReduceOp op, T* copy, int64_t divisor) {
  using C = typename Compute<T>::type;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      if constexpr (std::is_same_v<T, uint8_t>) {
        if (divisor != 1) {
          const C d = static_cast<C>(divisor);
          apply(
              dst, a, b, n, [d](C x, C y) { return static_cast<C>(static_cast<C>(x + y) / d); }, copy);
        } else {
          apply(
              dst, a, b, n, [](C x, C y) { return static_cast<C>(x + y); }, copy);
        }
      } else if (divisor == 1) {
        apply(
            dst, a, b, n, [](C x, C y) { return x + y; }, copy);
      } else if (Divide<C> dv(divisor); dv.pow2) {
        apply(
            dst, a, b, n, [inv = dv.inv](C x, C y) { return static_cast<C>((x + y) * inv); }, copy);
      } else {
        apply(
            dst, a, b, n, [d = dv.d](C x, C y) { return static_cast<C>((x + y) / d); }, copy);
      }
      break;
    case ReduceOp::product:
      if constexpr (std::is_same_v<T, uint8_t>) {
        apply(
            dst, a, b, n, [](C x, C y) { return static_cast<C>(x * y); }, copy);
      } else {
        apply(
            dst, a, b, n, [](C x, C y) { return x * y; }, copy);
      }
      break;
    case ReduceOp::min:
      apply(
          dst, a, b, n, [](C x, C y) { return y < x ? y : x; }, copy);
      break;
    case ReduceOp::max:
      apply(
          dst, a, b, n, [](C x, C y) { return x < y ? y : x; }, copy);
      break;
  }
}

}  // namespace

void reduceInto(void* dst, const void* a, const void* b, size_t n, DType dtype, ReduceOp op, void* copy,
                int64_t divisor) {
  LOCKSTEP_CHECK(divisor >= 1 && (divisor == 1 || op == ReduceOp::sum || op == ReduceOp::avg),
                 "reduceInto: divisor ", divisor, " with ", reduceOpName(op));
  visitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    reduceTyped(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), n, op,
                static_cast<T*>(copy), divisor);
  });
}

void divideBy(void* dst, size_t n, DType dtype, int64_t divisor) {
  visitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = typename Compute<T>::type;
    T* p = static_cast<T*>(dst);
    if constexpr (!std::is_same_v<T, uint8_t>) {
      if (Divide<C> dv(divisor); dv.pow2) {
        for (size_t i = 0; i < n; ++i) p[i] = T(static_cast<C>(static_cast<C>(p[i]) * dv.inv));
        return;
      }
    }
    for (size_t i = 0; i < n; ++i) p[i] = T(static_cast<C>(static_cast<C>(p[i]) / static_cast<C>(divisor)));
  });
}

}  // namespace lockstep::comm
