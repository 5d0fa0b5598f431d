#include "lockstep/comm/reduce_op.h"

#include <algorithm>
#include <type_traits>

namespace lockstep::comm {

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::product: return "product";
  }
  return "?";
}

namespace {

template <typename T>
struct Compute {
  using type = T;
};
template <> struct Compute<BFloat16> { using type = float; };
template <> struct Compute<Half> { using type = float; };

// The loops are written so GCC vectorises them at -O2 with the "cheap" cost model raised.
template <typename T, typename F>
__attribute__((optimize("O3"))) void apply(T* dst, const T* a, const T* b, size_t n, F f, T* copy) {
  using C = typename Compute<T>::type;
  if (copy != nullptr) {
    for (size_t i = 0; i < n; ++i) {
      T v;
      if constexpr (std::is_same_v<C, T>) v = f(a[i], b[i]);
      else v = T(f(static_cast<C>(a[i]), static_cast<C>(b[i])));
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

template <typename T>
void reduceTyped(T* dst, const T* a, const T* b, size_t n, ReduceOp op, T* copy) {
  using C = typename Compute<T>::type;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      if constexpr (std::is_same_v<T, uint8_t>) {
        apply(dst, a, b, n, [](C x, C y) { return static_cast<C>(x + y); }, copy);
      } else {
        apply(dst, a, b, n, [](C x, C y) { return x + y; }, copy);
      }
      break;
    case ReduceOp::product:
      if constexpr (std::is_same_v<T, uint8_t>) {
        apply(dst, a, b, n, [](C x, C y) { return static_cast<C>(x * y); }, copy);
      } else {
        apply(dst, a, b, n, [](C x, C y) { return x * y; }, copy);
      }
      break;
    case ReduceOp::min: apply(dst, a, b, n, [](C x, C y) { return y < x ? y : x; }, copy); break;
    case ReduceOp::max: apply(dst, a, b, n, [](C x, C y) { return x < y ? y : x; }, copy); break;
  }
}

}  // namespace

void reduceInto(void* dst, const void* a, const void* b, size_t n, DType dtype, ReduceOp op, void* copy) {
  visitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    reduceTyped(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), n, op,
                static_cast<T*>(copy));
  });
}

void divideBy(void* dst, size_t n, DType dtype, int64_t divisor) {
  visitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    using C = typename Compute<T>::type;
    T* p = static_cast<T*>(dst);
    for (size_t i = 0; i < n; ++i) p[i] = T(static_cast<C>(static_cast<C>(p[i]) / static_cast<C>(divisor)));
  });
}

}  // namespace lockstep::comm
