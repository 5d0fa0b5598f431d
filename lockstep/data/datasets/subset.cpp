#include "lockstep/data/datasets/subset.h"

namespace lockstep::data {

Subset::Subset(std::shared_ptr<Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  LOCKSTEP_ENFORCE(base_ != nullptr, ValueError, "Subset needs a base dataset");
  const int64_t n = base_->size();
  for (int64_t i : indices_) {
    LOCKSTEP_ENFORCE(i >= 0 && i < n, ValueError, "Subset: index ", i, " is outside the base dataset of ", n,
                     " samples");
  }
}

Example Subset::get(int64_t index) const {
  checkIndex(index, "Subset::get");
  return base_->get(indices_[static_cast<size_t>(index)]);
}

Batch Subset::gather(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (int64_t i : indices) {
    checkIndex(i, "Subset::gather");
    mapped.push_back(indices_[static_cast<size_t>(i)]);
  }
  Batch b = base_->gather(mapped);
  b.indices = indices;
  return b;
}

}  // namespace lockstep::data
