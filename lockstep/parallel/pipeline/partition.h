#pragma once
// How a pipeline cuts a model's layer sequence into stages: consecutive runs of layers, one per
// stage. Pure functions, unit-tested without processes; every rank computes the same cut.
//
// The methods are DeepSpeed's PipelineModule partition_method values, with its meanings:
//   parameters  balance the stages' parameter counts (DeepSpeed's default; ds_utils.partition_balanced,
//               the linear partition problem solved by dynamic programming, minimizing the spread
//               between the heaviest and the lightest stage)
//   uniform     balance the stages' layer counts (ds_utils.partition_uniform: the first
//               L % S stages get one layer more)
//   type:REGEX  balance the number of layers whose type name matches REGEX (case-insensitive
//               search), e.g. type:Block puts as many transformer blocks on every stage
// or explicit boundaries [0, b1, ..., L] (torch.distributed.pipelining's split points).
// Stage s holds layers [bounds[s], bounds[s + 1]).
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::parallel {

/// What partitioning needs to know of one layer.
struct PipelineLayerInfo {
  /// The layer's module type ("Block", "Conv2d"), what type:REGEX matches.
  std::string type_name;
  /// Its trainable parameter elements (a parameter shared by two layers counts in each).
  int64_t num_parameters = 0;
};

struct PartitionOptions {
  /// The number of stages (pipeline.stages); 1..number of layers.
  int64_t stages = 1;
  /// parameters, uniform or type:REGEX (pipeline.partition_method).
  std::string method = "parameters";
  /// Explicit stage boundaries [0, b1, ..., L] (stages + 1 increasing values); when given, method
  /// is not used.
  std::vector<int64_t> boundaries{};
};

/// The stage boundaries (stages + 1 values, first 0, last layers.size()), every stage at least one
/// layer. ValueError naming pipeline.stages for fewer than 1 or more stages than layers,
/// pipeline.partition_method for an unknown method or a bad regex, and pipeline.boundaries for
/// boundaries of the wrong count, not strictly increasing or not covering 0..L.
std::vector<int64_t> partitionLayers(const std::vector<PipelineLayerInfo>& layers,
                                     const PartitionOptions& options);

/// DeepSpeed's partition_uniform: parts + 1 boundaries over items, the first items % parts parts
/// one longer. Requires items >= parts >= 1.
std::vector<int64_t> partitionUniform(int64_t items, int64_t parts);

/// DeepSpeed's partition_balanced: the boundaries of `parts` non-empty consecutive runs of weights
/// whose sums have the smallest spread (heaviest - lightest), ties to the later cut as DeepSpeed's
/// dynamic program breaks them. O(n^2 parts). Requires weights.size() >= parts >= 1, weights >= 0.
std::vector<int64_t> partitionBalanced(const std::vector<int64_t>& weights, int64_t parts);

}  // namespace lockstep::parallel
