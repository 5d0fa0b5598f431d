#include "lockstep/data/transforms/transformed_dataset.h"

namespace lockstep::data {

TransformedDataset::TransformedDataset(std::shared_ptr<Dataset> base,
                                       std::vector<std::shared_ptr<const Transform>> transforms,
                                       const TransformedDatasetOptions& options)
    : base_(std::move(base)), transforms_(std::move(transforms)), options_(options) {
  LOCKSTEP_ENFORCE(base_ != nullptr, ValueError, "TransformedDataset needs a base dataset");
  for (const auto& t : transforms_)
    LOCKSTEP_ENFORCE(t != nullptr, ValueError, "TransformedDataset: null transform");
}

void TransformedDataset::transformInput(Tensor& input, int64_t index) const {
  TransformContext ctx{options_.seed, epoch_.load(std::memory_order_relaxed), index, 0};
  for (size_t k = 0; k < transforms_.size(); ++k) {
    ctx.slot = static_cast<uint32_t>(k);
    transforms_[k]->apply(input, ctx);
  }
}

Example TransformedDataset::get(int64_t index) const {
  Example e = base_->get(index);
  e.input = e.input.contiguous();  // get() returns the caller's copy, so in-place is safe
  transformInput(e.input, index);
  return e;
}

Batch TransformedDataset::gather(const std::vector<int64_t>& indices) const {
  Batch b = base_->gather(indices);
  if (!b.input.isContiguous()) b.input = b.input.contiguous();
  for (size_t r = 0; r < indices.size(); ++r) {
    Tensor row = b.input.select(static_cast<int64_t>(r));
    transformInput(row, indices[r]);
  }
  b.indices = indices;
  return b;
}

void TransformedDataset::setEpoch(uint64_t epoch) {
  epoch_.store(epoch);
  base_->setEpoch(epoch);
}

}  // namespace lockstep::data
