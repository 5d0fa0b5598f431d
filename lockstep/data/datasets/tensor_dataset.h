#pragma once
// TensorDataset: a whole dataset held as two tensors, rows along dim 0 (torch's TensorDataset).
#include "lockstep/data/dataset.h"

namespace lockstep::data {

/// Sample i is (inputs[i], targets[i]). The tensors are made contiguous once at construction so that
/// gather() is a memcpy per row: the DataLoader's fast path (no per-sample Example objects).
///
/// Thread-safety: immutable after construction; get() and gather() may run concurrently.
class TensorDataset : public Dataset {
 public:
  /// inputs [N, ...] (normally f32) and targets [N, ...] (normally i64 labels, shape [N]).
  /// ValueError when they are undefined, 0-d, or differ in N.
  TensorDataset(const Tensor& inputs, const Tensor& targets);

  int64_t size() const override { return size_; }
  /// Copies of row `index` (a 0-d target for labels of shape [N]).
  Example get(int64_t index) const override;
  /// Copies the rows `indices` straight from the two tensors into a new batch.
  Batch gather(const std::vector<int64_t>& indices) const override;

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
  int64_t size_ = 0;
};

}  // namespace lockstep::data
