#include "lockstep/data/datasets/random_split.h"

#include "lockstep/data/samplers/sampler.h"

namespace lockstep::data {

std::vector<std::shared_ptr<Subset>> randomSplit(const std::shared_ptr<Dataset>& dataset,
                                                 const std::vector<int64_t>& lengths, uint64_t seed) {
  LOCKSTEP_ENFORCE(dataset != nullptr, ValueError, "randomSplit needs a dataset");
  int64_t total = 0;
  for (int64_t len : lengths) {
    LOCKSTEP_ENFORCE(len >= 0, ValueError, "randomSplit: negative length ", len);
    total += len;
  }
  LOCKSTEP_ENFORCE(total == dataset->size(), ValueError, "randomSplit: sum of input lengths (", total,
                   ") does not equal the length of the input dataset (", dataset->size(), ")");
  const std::vector<int64_t> perm = randomPermutation(total, seed);
  std::vector<std::shared_ptr<Subset>> out;
  int64_t offset = 0;
  for (int64_t len : lengths) {
    out.push_back(std::make_shared<Subset>(
        dataset, std::vector<int64_t>(perm.begin() + offset, perm.begin() + offset + len)));
    offset += len;
  }
  return out;
}

}  // namespace lockstep::data
