#pragma once
// Reductions: sum/mean over dims (negative dims allowed, keepdim keeps them as size 1), and
// sumToShape, which folds a broadcast result's gradient back onto an operand's shape.
#include <cstdint>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels {

enum class ReduceOp { sum, mean };

/// Sum or mean of x over dims (each once; an empty list reduces nothing and returns a copy, as
/// numpy's axis=() does). A reduction over every dim without keepdim gives a 0-d tensor.
/// The mean of zero elements is NaN. Result dtype is x's; contiguous.
Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
/// Every dim of x, for reduce().
std::vector<int64_t> allDims(const Tensor& x);
/// The sum of g over the dims along which `shape` was broadcast to g's shape, viewed as `shape`
/// (so that sumToShape(broadcast(t), t.shape()) is the gradient of t). Returns g itself when the
/// shapes are equal. ValueError when `shape` does not broadcast to g's shape.
Tensor sumToShape(const Tensor& g, const Shape& shape);

/// For each dim of an ndim-tensor, whether it is reduced; ValueError on out-of-range or repeated
/// dims, naming `op`.
std::vector<bool> reducedMask(const std::vector<int64_t>& dims, int64_t ndim, const char* op);
/// x's shape with reduced dims set to 1 (keepdim) or dropped.
Shape reducedShape(const Shape& shape, const std::vector<bool>& mask, bool keepdim);

}  // namespace lockstep::kernels
