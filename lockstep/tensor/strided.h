#pragma once
// Walks the elements of strided tensors in row-major order of a shared shape. Adjacent dims that
// are contiguous in every operand are merged first, so dense cases become one inner loop.
#include <array>
#include <cstdint>

#include "lockstep/tensor/shape.h"

namespace lockstep {

/// Calls inner(offsets, n, inner_strides) for each innermost run of n elements, where offsets[k] is
/// operand k's element offset at the run's start and inner_strides[k] its stride along the run.
template <size_t K, typename Fn>
void forEachRun(const Shape& shape, const std::array<const Shape*, K>& strides, Fn&& inner) {
  // Merge dims.
  Shape sz;
  std::array<Shape, K> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !sz.empty();
    if (merge) {
      for (size_t k = 0; k < K; ++k) {
        if (st[k].back() != (*strides[k])[d] * shape[d]) merge = false;
      }
    }
    if (merge) {
      sz.back() *= shape[d];
      for (size_t k = 0; k < K; ++k) st[k].back() = (*strides[k])[d];
    } else {
      sz.push_back(shape[d]);
      for (size_t k = 0; k < K; ++k) st[k].push_back((*strides[k])[d]);
    }
  }
  for (int64_t d : shape) {
    if (d == 0) return;
  }
  if (sz.empty()) {
    sz.push_back(1);
    for (size_t k = 0; k < K; ++k) st[k].push_back(1);
  }
  const size_t nd = sz.size();
  const int64_t n = sz[nd - 1];
  std::array<int64_t, K> inner_st;
  for (size_t k = 0; k < K; ++k) inner_st[k] = st[k][nd - 1];
  std::array<int64_t, K> off{};
  Shape idx(nd, 0);
  while (true) {
    inner(off, n, inner_st);
    // advance the outer index
    size_t d = nd - 1;
    while (d-- > 0) {
      ++idx[d];
      for (size_t k = 0; k < K; ++k) off[k] += st[k][d];
      if (idx[d] < sz[d]) break;
      for (size_t k = 0; k < K; ++k) off[k] -= st[k][d] * sz[d];
      idx[d] = 0;
      if (d == 0) return;
    }
    if (nd == 1) return;
  }
}

}  // namespace lockstep
