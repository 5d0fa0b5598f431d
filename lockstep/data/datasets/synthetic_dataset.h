#pragma once
#include "lockstep/data/datasets/tensor_dataset.h"

namespace lockstep::data {

struct SyntheticDatasetOptions {
  int64_t size = 1024;
  Shape input_shape = {20};  // per sample, e.g. {1, 28, 28}
  int64_t num_classes = 10;
  uint64_t seed = 0;
};

/// A learnable classification set: inputs ~ N(0, 1) of input_shape, labels =
/// argmax_c (W x)_c for a fixed random teacher W [num_classes, prod(input_shape)] ~ N(0, 1).
/// Everything is drawn from Philox Generator(seed): the teacher first, then the inputs element by
/// element, so sample i is the same whatever `size` is. Materialised as a TensorDataset (fast gather).
/// Thread-safety: immutable after construction.
class SyntheticDataset : public TensorDataset {
 public:
  /// ValueError for size < 0, num_classes < 2, or an empty / non-positive input_shape.
  explicit SyntheticDataset(const SyntheticDatasetOptions& options = {});
  const SyntheticDatasetOptions& options() const { return options_; }
  /// The teacher W, f32 [num_classes, prod(input_shape)].
  const Tensor& teacher() const { return teacher_; }

 private:
  SyntheticDatasetOptions options_;
  Tensor teacher_;
};

}  // namespace lockstep::data
