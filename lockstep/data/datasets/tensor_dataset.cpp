#include "lockstep/data/datasets/tensor_dataset.h"

#include <cstring>

namespace lockstep::data {

TensorDataset::TensorDataset(const Tensor& inputs, const Tensor& targets) {
  LOCKSTEP_ENFORCE(inputs.defined() && targets.defined(), ValueError,
                   "TensorDataset needs defined inputs and targets");
  LOCKSTEP_ENFORCE(inputs.dim() >= 1 && targets.dim() >= 1, ValueError,
                   "TensorDataset needs tensors with a sample dimension, got inputs ", inputs.describe(),
                   " and targets ", targets.describe());
  LOCKSTEP_ENFORCE(inputs.size(0) == targets.size(0), ValueError, "TensorDataset: inputs ", inputs.describe(),
                   " and targets ", targets.describe(), " differ in the number of samples");
  inputs_ = inputs.contiguous();
  targets_ = targets.contiguous();
  size_ = inputs_.size(0);
}

Example TensorDataset::get(int64_t index) const {
  checkIndex(index, "TensorDataset::get");
  return Example{inputs_.select(index).clone(), targets_.select(index).clone()};
}

namespace {
Tensor gatherRows(const Tensor& src, const std::vector<int64_t>& indices) {
  Shape shape = src.shape();
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = Tensor::empty(shape, src.dtype());
  const size_t row_bytes = src.size(0) == 0 ? 0 : src.nbytes() / static_cast<size_t>(src.size(0));
  const auto* from = static_cast<const char*>(src.dataPtr());
  auto* to = static_cast<char*>(out.dataPtr());
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(to + i * row_bytes, from + static_cast<size_t>(indices[i]) * row_bytes, row_bytes);
  }
  return out;
}
}  // namespace

Batch TensorDataset::gather(const std::vector<int64_t>& indices) const {
  for (int64_t i : indices) checkIndex(i, "TensorDataset::gather");
  Batch b;
  b.input = gatherRows(inputs_, indices);
  b.target = gatherRows(targets_, indices);
  b.indices = indices;
  return b;
}

}  // namespace lockstep::data
