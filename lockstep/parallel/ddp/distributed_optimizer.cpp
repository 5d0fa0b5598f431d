#include "lockstep/parallel/ddp/distributed_optimizer.h"

#include <nlohmann/json.hpp>

#include "lockstep/kernels/scale.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/util/json.h"

namespace lockstep::parallel {

using autograd::Variable;

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<optim::Optimizer> optimizer,
                                           std::shared_ptr<comm::ProcessGroup> group,
                                           const DistributedOptimizerOptions& opts)
    : optimizer_(std::move(optimizer)), group_(std::move(group)), opts_(opts) {
  LOCKSTEP_ENFORCE(optimizer_ && group_, ValueError,
                   "DistributedOptimizer needs an optimizer and a process group");
  LOCKSTEP_ENFORCE(opts.backward_passes_per_step >= 1, ValueError,
                   "backward_passes_per_step must be >= 1, got ", opts.backward_passes_per_step);
  LOCKSTEP_ENFORCE(opts.fusion_threshold_bytes > 0, ValueError, "fusion_threshold_bytes must be positive");
  for (auto& g : optimizer_->paramGroups()) {
    for (auto& p : g.params) params_.push_back(p);
  }
  passes_.assign(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    hook_ids_.push_back(params_[i].registerGradReadyHook([this, i](Variable&) { ++passes_[i]; }));
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].removeGradReadyHook(hook_ids_[i]);
}

void DistributedOptimizer::synchronize() {
  // Every rank must send the same buffers: reduce each parameter's gradient, zeros where a rank
  // has none, packed in parameter order into fusion buffers of one dtype.
  const double inv = 1.0 / group_->size();
  size_t i = 0;
  while (i < params_.size()) {
    DType dt = params_[i].dtype();
    size_t j = i, bytes = 0;
    int64_t elems = 0;
    while (j < params_.size() && params_[j].dtype() == dt &&
           (j == i || bytes + params_[j].tensor().nbytes() <= opts_.fusion_threshold_bytes)) {
      bytes += params_[j].tensor().nbytes();
      elems += params_[j].numel();
      ++j;
    }
    if (!fusion_.defined() || fusion_.dtype() != dt || fusion_.numel() < elems)
      fusion_ = Tensor::empty({elems}, dt);
    Tensor buf = fusion_.narrow(0, 0, elems);
    int64_t off = 0;
    for (size_t k = i; k < j; ++k) {
      Tensor slot = buf.narrow(0, off, params_[k].numel()).view(params_[k].shape());
      if (params_[k].hasGrad()) {
        slot.copyFrom(params_[k].grad());
      } else {
        slot.zero();
      }
      off += params_[k].numel();
    }
    kernels::scaleInPlace(buf, inv);
    if (opts_.compression == Compression::fp16) {
      if (!wire_.defined() || wire_.numel() < elems) wire_ = Tensor::empty({elems}, DType::f16);
      Tensor w = wire_.narrow(0, 0, elems);
      w.copyFrom(buf);
      allreduce(*group_, w)->wait();
      buf.copyFrom(w);
    } else {
      allreduce(*group_, buf)->wait();
    }
    off = 0;
    for (size_t k = i; k < j; ++k) {
      Tensor slot = buf.narrow(0, off, params_[k].numel()).view(params_[k].shape());
      if (params_[k].hasGrad()) {
        Tensor g = params_[k].grad();
        g.copyFrom(slot);
      } else {
        params_[k].setGrad(slot.clone());
      }
      off += params_[k].numel();
    }
    i = j;
  }
}

void DistributedOptimizer::step() {
  int passes = 0;
  for (int p : passes_) passes = std::max(passes, p);
  LOCKSTEP_ENFORCE(passes == opts_.backward_passes_per_step, ValueError,
                   "DistributedOptimizer::step() after ", passes,
                   " backward passes, but backward_passes_per_step is ", opts_.backward_passes_per_step,
                   "; call step() once every ", opts_.backward_passes_per_step, " backward passes");
  synchronize();
  optimizer_->step();
  std::fill(passes_.begin(), passes_.end(), 0);
}

void broadcastParameters(const std::vector<Variable>& params, comm::ProcessGroup& group, int root) {
  autograd::NoGradGuard ng;
  for (Variable p : params) broadcast(group, p.tensor(), root);
}

void broadcastOptimizerState(optim::Optimizer& optimizer, comm::ProcessGroup& group, int root) {
  // Root describes its state (names, dtypes, shapes, hyper-parameters) as JSON; the tensors follow.
  optim::OptimizerStateDict sd = optimizer.stateDict();
  nlohmann::json desc = nlohmann::json::object();
  if (group.rank() == root) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& [name, t] : sd.state) tensors.push_back({name, dtypeName(t.dtype()), t.shape()});
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : sd.param_groups) {
      nlohmann::json opts = nlohmann::json::object();
      for (const auto& [k, v] : g.options) {
        std::visit([&, &key = k](auto x) { opts[key] = x; }, v);  // clang 14 cannot capture a binding
      }
      groups.push_back({{"options", opts}, {"params", g.params}});
    }
    desc = {{"tensors", tensors}, {"groups", groups}};
  }
  desc = json::parse(broadcastBytes(group, desc.dump(), root));
  optim::OptimizerStateDict out;
  for (const auto& e : desc["tensors"]) {
    std::string name = e[0];
    Tensor t = group.rank() == root
                   ? sd.state.at(name).contiguous()
                   : Tensor::empty(e[2].get<Shape>(), dtypeFromName(e[1].get<std::string>()));
    broadcast(group, t, root);
    out.state.insert(name, t);
  }
  for (const auto& g : desc["groups"]) {
    optim::ParamGroupState gs;
    for (const auto& [k, v] : g["options"].items()) {
      if (v.is_boolean()) {
        gs.options[k] = v.get<bool>();
      } else if (v.is_number_integer()) {
        gs.options[k] = v.get<int64_t>();
      } else {
        gs.options[k] = v.get<double>();
      }
    }
    gs.params = g["params"].get<std::vector<int64_t>>();
    out.param_groups.push_back(std::move(gs));
  }
  if (group.rank() != root) optimizer.loadStateDict(out);
}

}  // namespace lockstep::parallel
