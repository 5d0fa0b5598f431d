#pragma once
#include <memory>

#include "lockstep/data/dataset.h"

namespace lockstep::data {

/// A view of another dataset through a list of its indices (torch's Subset): sample i is
/// base[indices[i]]. gather() forwards to the base's gather, so a TensorDataset keeps its fast
/// path; the returned batch's indices are the subset's own (0..size()-1).
/// Thread-safety: immutable; as thread-safe as the base dataset.
class Subset : public Dataset {
 public:
  /// ValueError when an index is outside the base dataset.
  Subset(std::shared_ptr<Dataset> base, std::vector<int64_t> indices);

  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index) const override;
  Batch gather(const std::vector<int64_t>& indices) const override;
  /// Forwards to the base dataset.
  void setEpoch(uint64_t epoch) override { base_->setEpoch(epoch); }

  const std::vector<int64_t>& indices() const { return indices_; }
  const std::shared_ptr<Dataset>& base() const { return base_; }

 private:
  std::shared_ptr<Dataset> base_;
  std::vector<int64_t> indices_;
};

}  // namespace lockstep::data
