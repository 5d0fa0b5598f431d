#pragma once
#include <memory>
#include <vector>

#include "lockstep/data/datasets/subset.h"

namespace lockstep::data {

/// Splits `dataset` into disjoint random subsets of the given sizes (torch.utils.data.random_split),
/// e.g. randomSplit(train, {48000, 12000}, 42). The sizes must sum to dataset->size() (ValueError
/// otherwise). Subset k takes the next lengths[k] entries of randomPermutation(size, seed): the
/// split depends only on (size, lengths, seed). Reentrant.
std::vector<std::shared_ptr<Subset>> randomSplit(const std::shared_ptr<Dataset>& dataset,
                                                 const std::vector<int64_t>& lengths, uint64_t seed);

}  // namespace lockstep::data
