#pragma once
#include <atomic>
#include <memory>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/data/transforms/transform.h"

namespace lockstep::data {

struct TransformedDatasetOptions {
  uint64_t seed = 0;  // key of the transforms' random streams
};

/// Applies a pipeline of transforms to the inputs of a base dataset. Sample i of epoch e is
/// transformed with TransformContext{seed, e, i, slot}, so results do not depend on worker count or
/// load order. gather() uses the base's gather (fast path) and transforms the rows in place.
/// Thread-safety: get()/gather() may run concurrently; setEpoch() must not race with them.
class TransformedDataset : public Dataset {
 public:
  /// ValueError for a null base or transform.
  TransformedDataset(std::shared_ptr<Dataset> base, std::vector<std::shared_ptr<const Transform>> transforms,
                     const TransformedDatasetOptions& options = {});

  int64_t size() const override { return base_->size(); }
  Example get(int64_t index) const override;
  Batch gather(const std::vector<int64_t>& indices) const override;
  /// Selects the epoch of the random draws; forwarded to the base too.
  void setEpoch(uint64_t epoch) override;
  uint64_t epoch() const { return epoch_.load(); }

 private:
  std::shared_ptr<Dataset> base_;
  std::vector<std::shared_ptr<const Transform>> transforms_;
  TransformedDatasetOptions options_;
  std::atomic<uint64_t> epoch_{0};

  void transformInput(Tensor& input, int64_t index) const;
};

}  // namespace lockstep::data
