#pragma once
// The two value types that flow out of a Dataset: one sample (Example) and a stacked batch (Batch).
// Thread-safety: plain values; a Batch handed to the consumer is owned by it alone.
#include <cstdint>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::data {

/// One sample. Classification datasets give input f32 and target a 0-d i64 class label;
/// regression datasets give a f32 target of shape [out_features].
struct Example {
  Tensor input;
  Tensor target;
};

/// A batch: inputs stacked along a new dim 0, targets likewise ([B] for class labels), and the
/// dataset indices the rows came from (row i is sample indices[i]).
struct Batch {
  Tensor input;
  Tensor target;
  std::vector<int64_t> indices;

  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

}  // namespace lockstep::data
