#include "lockstep/parallel/pipeline/partition.h"

#include <algorithm>
#include <limits>
#include <regex>

#include "lockstep/util/error.h"

namespace lockstep::parallel {

namespace {

constexpr const char* kTypePrefix = "type:";

std::string joined(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void checkBoundaries(const std::vector<int64_t>& b, int64_t layers, int64_t stages) {
  LOCKSTEP_ENFORCE(static_cast<int64_t>(b.size()) == stages + 1, ValueError, "pipeline.boundaries ",
                   joined(b), " has ", b.size(), " values; ", stages, " stages need ", stages + 1,
                   " (0, the first layer of each later stage, then the layer count ", layers, ")");
  LOCKSTEP_ENFORCE(b.front() == 0 && b.back() == layers, ValueError, "pipeline.boundaries ", joined(b),
                   " must start at 0 and end at the layer count ", layers,
                   " so that every layer is on a stage");
  for (size_t s = 0; s + 1 < b.size(); ++s) {
    LOCKSTEP_ENFORCE(b[s] < b[s + 1], ValueError, "pipeline.boundaries ", joined(b),
                     " must be strictly increasing (stage ", s, " would hold no layer)");
  }
}

}  // namespace

std::vector<int64_t> partitionUniform(int64_t items, int64_t parts) {
  LOCKSTEP_CHECK(parts >= 1 && items >= parts, items, parts);
  const int64_t chunk = items / parts, residual = items % parts;
  std::vector<int64_t> bounds(static_cast<size_t>(parts + 1));
  for (int64_t p = 0; p <= parts; ++p) bounds[static_cast<size_t>(p)] = p * chunk + std::min(p, residual);
  return bounds;
}

std::vector<int64_t> partitionBalanced(const std::vector<int64_t>& weights, int64_t parts) {
  const auto n = static_cast<int64_t>(weights.size());
  LOCKSTEP_CHECK(parts >= 1 && n >= parts, n, parts);
  // Sums are exact in double up to 2^53 parameters; infinity marks a prefix that cannot be cut
  // into j non-empty runs, as DeepSpeed's numpy tables do.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const auto cols = static_cast<size_t>(parts + 1);
  auto at = [cols](int64_t i, int64_t j) { return static_cast<size_t>(i) * cols + static_cast<size_t>(j); };
  const size_t cells = static_cast<size_t>(n + 1) * cols;
  std::vector<double> dp_max(cells, kInf), dp_min(cells, kInf), dp_cost(cells, kInf);
  std::vector<int64_t> position(cells, 0);
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    LOCKSTEP_CHECK(weights[static_cast<size_t>(i)] >= 0, i, weights[static_cast<size_t>(i)]);
    prefix[static_cast<size_t>(i + 1)] =
        prefix[static_cast<size_t>(i)] + static_cast<double>(weights[static_cast<size_t>(i)]);
  }
  dp_max[at(0, 0)] = 0;
  dp_cost[at(0, 0)] = 0;
  for (int64_t i = 1; i <= n; ++i) {
    for (int64_t j = 1; j <= std::min(i, parts); ++j) {
      for (int64_t k = 0; k < i; ++k) {
        const double run = prefix[static_cast<size_t>(i)] - prefix[static_cast<size_t>(k)];
        const double hi = std::max(dp_max[at(k, j - 1)], run), lo = std::min(dp_min[at(k, j - 1)], run);
        const double cost = hi - lo;
        // ">=": among equally good cuts the last one wins, as in DeepSpeed.
        if (dp_cost[at(i, j)] >= cost) {
          dp_cost[at(i, j)] = cost;
          dp_max[at(i, j)] = hi;
          dp_min[at(i, j)] = lo;
          position[at(i, j)] = k;
        }
      }
    }
  }
  std::vector<int64_t> bounds{n};
  for (int64_t j = parts; j >= 1; --j) bounds.push_back(position[at(bounds.back(), j)]);
  std::reverse(bounds.begin(), bounds.end());
  return bounds;
}

std::vector<int64_t> partitionLayers(const std::vector<PipelineLayerInfo>& layers,
                                     const PartitionOptions& options) {
  const auto n = static_cast<int64_t>(layers.size());
  LOCKSTEP_ENFORCE(options.stages >= 1, ValueError, "pipeline.stages must be at least 1, got ",
                   options.stages);
  LOCKSTEP_ENFORCE(options.stages <= n, ValueError, "pipeline.stages is ", options.stages,
                   " but the model has only ", n,
                   " layers to split; every stage needs at least one layer: use at most ", n, " stages");
  if (!options.boundaries.empty()) {
    checkBoundaries(options.boundaries, n, options.stages);
    return options.boundaries;
  }
  const std::string& method = options.method;
  if (method == "uniform") return partitionUniform(n, options.stages);
  std::vector<int64_t> weights;
  if (method == "parameters") {
    for (const auto& l : layers) weights.push_back(l.num_parameters);
  } else if (method.rfind(kTypePrefix, 0) == 0) {
    const std::string pattern = method.substr(std::string(kTypePrefix).size());
    std::regex re;
    try {
      re = std::regex(pattern, std::regex::ECMAScript | std::regex::icase);
    } catch (const std::regex_error& e) {
      throw ValueError("pipeline.partition_method '" + method + "': '" + pattern +
                       "' is no regular expression (" + e.what() + ")");
    }
    int64_t matched = 0;
    for (const auto& l : layers) {
      weights.push_back(std::regex_search(l.type_name, re) ? 1 : 0);
      matched += weights.back();
    }
    LOCKSTEP_ENFORCE(matched > 0, ValueError, "pipeline.partition_method '", method,
                     "' matches no layer's type name; the layers' types are what the model's layer sequence "
                     "lists (e.g. Block, BasicBlock)");
  } else {
    throw ValueError(
        "pipeline.partition_method '" + method +
        "' is unknown; use parameters (balance parameter counts), uniform (balance layer counts) "
        "or type:REGEX (balance the layers whose type matches REGEX)");
  }
  return partitionBalanced(weights, options.stages);
}

}  // namespace lockstep::parallel
