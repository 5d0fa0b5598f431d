// ZeroOptimizer's state in and out (zero/optimizer.h): the optimizer state as DDP's optimizer would
// hold it (gathered from every rank's partition), this rank's owned segments and their state for a
// partitioned checkpoint, and loading either kind back into this rank's partition.
#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/parallel/zero/optimizer.h"
#include "lockstep/parallel/zero/parameter_coordinator.h"
#include "lockstep/util/error.h"

namespace lockstep::parallel {

optim::OptimizerStateDict ZeroOptimizer::consolidatedStateDict(int root) {
  LOCKSTEP_ENFORCE(root >= -1 && root < world_, ValueError, "consolidatedStateDict: root ", root,
                   " is not a rank of ", world_);
  const bool receives = root < 0 || root == rank_;
  const optim::OptimizerStateDict mine = partitionOptimizerState();
  // The buffer names every rank holds (a rank with no elements holds none): the same list everywhere.
  std::set<std::string> keys;
  // Per parameter, over every rank (max): its step count, and whether any rank's shard of it has
  // state (SGD keeps no step): a parameter no rank has stepped gets no keys, as in torch.
  const size_t n = params_.size();
  std::vector<double> steps(2 * n, 0.0);
  for (const Shard& s : shards_) {
    const std::string prefix = std::to_string(s.opt_index) + ".";
    for (const auto& [key, t] : mine.state) {
      if (key.rfind(prefix, 0) != 0) continue;
      const std::string name = key.substr(prefix.size());
      steps[n + s.param] = 1.0;
      if (name == "step") {
        steps[s.param] = std::max(steps[s.param], static_cast<double>(t.toVector<int64_t>()[0]));
      } else {
        keys.insert(name);
      }
    }
  }
  if (group_ && world_ > 1) {
    std::string joined;
    for (const auto& k : keys) joined += k + "\n";
    for (const std::string& other : allgatherBytes(*group_, joined)) {
      std::istringstream in(other);
      for (std::string k; std::getline(in, k);) keys.insert(k);
    }
    if (!steps.empty()) {
      comm::AllreduceOptions o;
      o.op = comm::ReduceOp::max;
      group_->allreduce(steps.data(), steps.size(), DType::f64, o)->wait();
    }
  }
  optim::OptimizerStateDict out;
  for (const std::string& key : keys) {
    // This rank's elements of the key, by parameter (a parameter has at most one shard here: a
    // rank's piece of a bucket is contiguous). Zeros where the optimizer has no such buffer.
    std::vector<Tensor> src(params_.size());
    std::vector<int64_t> src_offset(params_.size(), 0);
    // Gathered in host memory (a state dict's tensors are the host's, whatever the parameters' device).
    // The states' dtype: the optimizer's for the shards' (f32 with f32 master weights, whatever the
    // parameters'; with master weights in bf16, bf16, or f32 with Adam's fp32_states). One for all:
    // every rank, also one holding no shard, gathers in it.
    const DType dtype = stateDType();
    for (const Shard& s : shards_) {
      const Tensor* found = mine.state.find(std::to_string(s.opt_index) + "." + key);
      src[s.param] = found ? found->to(Device::cpu()).contiguous() : Tensor::zeros({s.numel}, dtype);
      LOCKSTEP_CHECK(src[s.param].dtype() == dtype && src[s.param].numel() == s.numel);
      src_offset[s.param] = s.param_offset;
    }
    const size_t elem = dtypeSize(dtype);
    std::vector<Tensor> full;
    std::vector<char*> ptrs(params_.size(), nullptr);
    if (receives) {  // only the ranks that get the result hold whole-parameter tensors
      for (size_t p = 0; p < params_.size(); ++p) {
        full.push_back(Tensor::zeros(shapes_[p], dtype));
        ptrs[p] = static_cast<char*>(full.back().dataPtr());
        if (src[p].defined())
          std::memcpy(ptrs[p] + src_offset[p] * elem, src[p].dataPtr(), src[p].numel() * elem);
      }
    }
    gatherPieces(ptrs, Device::cpu(), dtype, world_ > 1 ? root : -1, [&](size_t p, int64_t offset) {
      return static_cast<const char*>(src[p].dataPtr()) + (offset - src_offset[p]) * elem;
    });
    if (!receives) continue;
    for (size_t p = 0; p < n; ++p) {
      // Only the buffers the parameter's group keeps (groups may differ: amsgrad, momentum 0).
      const auto wanted = optimizer_->stateKeys(optimizer_->paramGroups()[group_of_[p]].options);
      if (steps[n + p] > 0 && std::find(wanted.begin(), wanted.end(), key) != wanted.end())
        out.state.insert(std::to_string(p) + "." + key, full[p]);
    }
  }
  for (size_t p = 0; p < n && receives; ++p) {
    if (steps[p] > 0) out.state.insert(std::to_string(p) + ".step", Tensor::scalar(steps[p], DType::i64));
  }
  for (size_t g = 0; g < mine.param_groups.size(); ++g)
    out.param_groups.push_back({mine.param_groups[g].options, group_params_[g]});
  return out;
}

DType ZeroOptimizer::stateDType() const {
  const DType values = master_ || params_.empty() ? DType::f32 : params_.front().dtype();
  const auto& groups = optimizer_->paramGroups();
  const DType dtype = groups.empty() ? values : optimizer_->stateDType(groups.front().options, values);
  for (size_t g = 1; g < groups.size(); ++g)
    LOCKSTEP_ENFORCE(optimizer_->stateDType(groups[g].options, values) == dtype, NotSupportedError,
                     "ZeRO: the optimizer's parameter groups keep their states in different dtypes (", g,
                     " and 0); give every group the same fp32_states");
  return dtype;
}

optim::OptimizerStateDict ZeroOptimizer::partitionOptimizerState() const {
  return offload_ ? offload_->stateDict() : optimizer_->stateDict();
}

std::vector<ZeroOptimizer::OwnedSegment> ZeroOptimizer::ownedSegments() const {
  std::vector<OwnedSegment> out;
  // Swapped pieces: copies read back from the swap file (the whole partition, while saved).
  const bool copy = parameterSwap() != nullptr;
  forEachShard(Pieces::parameters, false, [&](const Shard& s) {
    out.push_back(
        {s.param, s.param_offset, s.numel, s.opt_index, copy ? s.var.tensor().clone() : s.var.tensor()});
  });
  return out;
}

void ZeroOptimizer::loadConsolidatedStateDict(const optim::OptimizerStateDict& state) {
  loadStateDictPieces(state, false);
}

void ZeroOptimizer::loadPartitionStateDict(const optim::OptimizerStateDict& state) {
  loadStateDictPieces(state, true);
}

void ZeroOptimizer::loadStateDictPieces(const optim::OptimizerStateDict& state, bool partition) {
  LOCKSTEP_ENFORCE(state.param_groups.size() == group_params_.size(), ValueError,
                   "ZeRO: the optimizer state has ", state.param_groups.size(),
                   " parameter groups, this optimizer ", group_params_.size());
  optim::OptimizerStateDict osd;
  for (size_t g = 0; g < group_params_.size(); ++g) {
    LOCKSTEP_ENFORCE(state.param_groups[g].params.size() == group_params_[g].size(), ValueError,
                     "ZeRO: parameter group ", g, " of the optimizer state has ",
                     state.param_groups[g].params.size(), " parameters, this optimizer's has ",
                     group_params_[g].size());
    osd.param_groups.push_back({state.param_groups[g].options, {}});
  }
  for (const Shard& s : shards_) {
    osd.param_groups[group_of_[s.param]].params.push_back(s.opt_index);
    const std::string prefix = std::to_string(s.param) + ".";
    const std::string to = std::to_string(s.opt_index) + ".";
    for (const auto& [key, t] : state.state) {
      if (key.rfind(prefix, 0) != 0) continue;
      const std::string name = key.substr(prefix.size());
      if (name == "step") {
        osd.state.insert(to + name, t);
        continue;
      }
      if (partition) {
        LOCKSTEP_ENFORCE(t.numel() == s.numel, ValueError, "ZeRO: optimizer state '", key, "' has ",
                         t.numel(), " elements, this rank's part of parameter '", names_[s.param], "' has ",
                         s.numel);
        osd.state.insert(to + name, t.contiguous().view({s.numel}));
        continue;
      }
      LOCKSTEP_ENFORCE(t.numel() == shapeNumel(shapes_[s.param]), ValueError, "ZeRO: optimizer state '", key,
                       "' has ", t.numel(), " elements, parameter '", names_[s.param], "' has ",
                       shapeNumel(shapes_[s.param]));
      osd.state.insert(to + name, t.contiguous().view({t.numel()}).narrow(0, s.param_offset, s.numel));
    }
  }
  if (offload_) {
    offload_->loadStateDict(osd);
  } else {
    optimizer_->loadStateDict(osd);
  }
}

}  // namespace lockstep::parallel
