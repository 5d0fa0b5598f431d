#include "lockstep/train/checkpoint/pipeline_checkpoint.h"

#include <charconv>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/train/checkpoint/training_state.h"
#include "lockstep/train/checkpoint/zero_checkpoint.h"
#include "lockstep/util/error.h"

namespace lockstep::train {

namespace {

std::string stageFileName(int64_t stage, int64_t stages) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "pipeline/stage-%05lld-of-%05lld.safetensors", static_cast<long long>(stage),
                static_cast<long long>(stages));
  return buf;
}

std::string stageReplicaFileName(int64_t stage, int64_t stages, int64_t replica, int64_t replicas) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "pipeline/stage-%05lld-of-%05lld-zero-%05lld-of-%05lld.safetensors",
                static_cast<long long>(stage), static_cast<long long>(stages),
                static_cast<long long>(replica), static_cast<long long>(replicas));
  return buf;
}

// The stage's parameters in its optimizer's order, by group (ZeRO's groups hold shard variables,
// so its own record of the parameters is read then).
std::vector<std::vector<autograd::Variable>> stageParamGroups(const PipelineCheckpointParts& parts) {
  std::vector<std::vector<autograd::Variable>> groups;
  if (parts.zero) {
    for (const auto& indices : parts.zero->groupParameters()) {
      groups.emplace_back();
      for (int64_t i : indices) groups.back().push_back(parts.zero->parameters()[static_cast<size_t>(i)]);
    }
    return groups;
  }
  for (const auto& g : parts.optimizer->paramGroups()) groups.push_back(g.params);
  return groups;
}

// This replica's ZeRO partition of the stage: its runs of the stage's owned parameters, with
// their optimizer state.
CheckpointPartition stageZeroPartition(const PipelineCheckpointParts& parts) {
  const parallel::PipelineStage& stage = *parts.stage;
  const parallel::ZeroOptimizer& zero = *parts.zero;
  const WholeOptimizerLayout& layout = *parts.layout;
  CheckpointPartition part;
  part.file = stageReplicaFileName(stage.stage(), stage.stages(), parts.replica, parts.replicas);
  part.parameters = static_cast<int64_t>(layout.names.size());
  part.metadata = {{"pipeline_stage", std::to_string(stage.stage())},
                   {"pipeline_stages", std::to_string(stage.stages())},
                   {"replica", std::to_string(parts.replica)},
                   {"replicas", std::to_string(parts.replicas)},
                   {"stage", "1"}};
  const optim::OptimizerStateDict osd = zero.partitionOptimizerState();
  for (const auto& s : zero.ownedSegments()) {
    const autograd::Variable& p = zero.parameters()[s.param];
    if (!stage.ownsParameter(p)) continue;
    const auto w = static_cast<size_t>(layout.index.at(p.impl().get()));
    PartitionSegment seg{w, layout.names[w], p.shape(), s.param_offset, s.numel, s.values, {}};
    const std::string prefix = std::to_string(s.opt_index) + ".";
    for (const auto& [key, t] : osd.state)
      if (key.rfind(prefix, 0) == 0) seg.state.emplace_back(key.substr(prefix.size()), t);
    part.segments.push_back(std::move(seg));
  }
  return part;
}

// The stage's layers' buffers (what is not a parameter) under the whole model's names: the layers
// hold the model's own tensors, matched by their storage.
NamedTensors stageBuffers(const nn::Module& model, const parallel::PipelineStage& stage) {
  // By storage, not address: the other stages' tensors may be released (no address to read).
  std::set<const Storage*> mine;
  for (const nn::Module* layer : stage.layers())
    for (const auto& [name, t] : layer->stateDict()) mine.insert(t.storage().get());
  std::set<std::string> params;
  for (const auto& [name, p] : model.namedParameters()) params.insert(name);
  NamedTensors out;
  for (const auto& [name, t] : model.stateDict())
    if (!params.count(name) && mine.count(t.storage().get()))
      out.emplace_back(name, t.to(Device::cpu()).contiguous());  // a GPU stage's too
  return out;
}

// This stage's partition: its owned parameters whole, with their optimizer state.
CheckpointPartition stagePartition(const PipelineCheckpointParts& parts) {
  const parallel::PipelineStage& stage = *parts.stage;
  const WholeOptimizerLayout& layout = *parts.layout;
  CheckpointPartition part;
  part.file = stageFileName(stage.stage(), stage.stages());
  part.parameters = static_cast<int64_t>(layout.names.size());
  part.metadata = {{"pipeline_stage", std::to_string(stage.stage())},
                   {"pipeline_stages", std::to_string(stage.stages())}};
  // The optimizer's state by its flat index ("<index>.<key>"), read once.
  std::map<int64_t, std::vector<std::pair<std::string, Tensor>>> state;
  for (const auto& [key, t] : parts.optimizer->stateDict().state) {
    const size_t dot = key.find('.');
    state[std::stoll(key.substr(0, dot))].emplace_back(key.substr(dot + 1), t.to(Device::cpu()).contiguous());
  }
  int64_t j = 0;  // the stage optimizer's flat index
  for (const auto& group : parts.optimizer->paramGroups()) {
    for (const auto& p : group.params) {
      const int64_t index = j++;
      if (!stage.ownsParameter(p)) continue;
      const auto w = static_cast<size_t>(layout.index.at(p.impl().get()));
      part.segments.push_back({w, layout.names[w], p.shape(), 0, p.tensor().numel(),
                               p.tensor().to(Device::cpu()).contiguous(), std::move(state[index])});
    }
  }
  return part;
}

// The parts training_state.h saves and restores as for any run; the stage's optimizer is numbered
// apart.
TrainingParts allButTheOptimizer(const PipelineCheckpointParts& parts) {
  TrainingParts tp;
  tp.model = parts.model;
  tp.scheduler = parts.scheduler;
  tp.loss_scaler = parts.loss_scaler;
  tp.loader = parts.loader;
  tp.rng = parts.rng;
  tp.config = parts.config;
  tp.world_size = parts.replicas;  // the loader's shards
  return tp;
}

}  // namespace

WholeOptimizerLayout wholeOptimizerLayout(const optim::Optimizer& whole, const nn::Module& model) {
  WholeOptimizerLayout l;
  std::unordered_map<const autograd::VariableImpl*, std::string> name_of;
  for (const auto& [name, p] : model.namedParameters()) name_of.emplace(p.impl().get(), name);
  for (const auto& g : whole.paramGroups()) {
    l.groups.push_back(g.params);
    l.options.push_back(g.options);
    for (const auto& p : g.params) {
      l.index.emplace(p.impl().get(), static_cast<int64_t>(l.names.size()));
      l.names.push_back(name_of.at(p.impl().get()));
    }
  }
  return l;
}

std::string savePipelineCheckpoint(const std::string& dir, const PipelineCheckpointParts& parts, int64_t step,
                                   const RunIdentity& identity, const CheckpointOptions& opts) {
  const parallel::PipelineStage& stage = *parts.stage;
  const bool writer = parts.replica == 0;  // the replicas of a stage hold the same values
  // The buffers of every stage reach rank 0 (small: batch norm's statistics), which writes them.
  const std::string mine = writer ? encodeSafetensors(stageBuffers(*parts.model, stage)) : std::string();
  const std::vector<std::string> all = parallel::allgatherBytes(*parts.world, mine);
  CheckpointData d = captureTrainingState(allButTheOptimizer(parts), step);
  d.identity = identity;
  NamedTensors buffers;
  if (parts.world->rank() == 0) {
    std::map<std::string, Tensor> latest;
    for (const std::string& bytes : all) {
      if (bytes.empty()) continue;
      for (auto& [name, t] : decodeSafetensors(bytes, "a stage's buffers").tensors) latest[name] = t;
    }
    std::set<std::string> params;
    for (const auto& [name, p] : parts.model->namedParameters()) params.insert(name);
    for (const auto& [name, t] : d.model) {
      if (params.count(name)) continue;
      auto it = latest.find(name);
      buffers.emplace_back(name, it != latest.end() ? it->second : t);
    }
  }
  d.model = std::move(buffers);
  // The groups in the whole model's numbering, so that any run resumes them.
  nlohmann::json groups = nlohmann::json::array();
  const auto& stage_groups = parts.optimizer->paramGroups();
  for (size_t g = 0; g < parts.layout->groups.size(); ++g) {
    std::vector<int64_t> indices;
    for (const auto& p : parts.layout->groups[g]) indices.push_back(parts.layout->index.at(p.impl().get()));
    groups.push_back({{"options", hyperToJson(stage_groups[g].options)}, {"params", indices}});
  }
  d.state["optimizer"] = {{"type", parts.optimizer->name()}, {"param_groups", groups}};
  const nlohmann::json layout = {{"pipeline",
                                  {{"stages", stage.stages()},
                                   {"virtual_stages", stage.chunks()},
                                   {"replicas", parts.replicas},
                                   {"boundaries", stage.boundaries()}}}};
  std::optional<CheckpointPartition> part;
  if (parts.zero)
    part = stageZeroPartition(parts);
  else if (writer)
    part = stagePartition(parts);
  return savePartitionedCheckpoint(dir, d, part, parts.zero ? 1 : 0, layout, parts.world, opts);
}

namespace {

// The model's state-dict keys of the stage's layers (parameters and buffers).
std::set<std::string> stageModelKeys(const PipelineCheckpointParts& parts) {
  std::set<const Storage*> mine;
  for (const nn::Module* layer : parts.stage->layers())
    for (const auto& [name, t] : layer->stateDict()) mine.insert(t.storage().get());
  std::set<std::string> keys;
  for (const auto& [name, t] : parts.model->stateDict())
    if (mine.count(t.storage().get())) keys.insert(name);
  return keys;
}

// The whole optimizer's indices of the stage's parameters.
std::set<int64_t> stageParameterIndices(const PipelineCheckpointParts& parts) {
  std::set<int64_t> indices;
  for (const auto& group : stageParamGroups(parts))
    for (const auto& p : group) indices.insert(parts.layout->index.at(p.impl().get()));
  return indices;
}

}  // namespace

CheckpointSelection pipelineCheckpointSelection(const PipelineCheckpointParts& parts) {
  auto keys = std::make_shared<const std::set<std::string>>(stageModelKeys(parts));
  auto indices = std::make_shared<const std::set<int64_t>>(stageParameterIndices(parts));
  const nn::Module* model = parts.model;
  CheckpointSelection keep;
  keep.model = [keys, model](const std::string& name) { return keys->count(model->currentKey(name)) > 0; };
  keep.optimizer = [indices](const std::string& key) {  // "<whole index>.<state>"
    const auto dot = key.find('.');
    if (dot == 0 || dot == std::string::npos) return false;
    int64_t index = 0;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + dot, index);
    return ec == std::errc() && end == key.data() + dot && indices->count(index) > 0;
  };
  return keep;
}

std::string restorePipelineCheckpoint(const CheckpointData& d, const PipelineCheckpointParts& parts) {
  TrainingParts tp = allButTheOptimizer(parts);
  // Only the stage's layers are loaded (and, given pipelineCheckpointSelection, read): the other
  // stages' have no memory here.
  const std::set<std::string> keys = stageModelKeys(parts);
  tp.model_keys = [&](const std::string& key) { return keys.count(key) > 0; };
  const std::string note = restoreTrainingState(d, tp);
  const std::set<int64_t> stage_indices = stageParameterIndices(parts);
  const nlohmann::json& s = d.state;
  optim::Optimizer& opt = *parts.optimizer;
  try {
    LOCKSTEP_ENFORCE(s.contains("optimizer"), ValueError, "the checkpoint holds no optimizer state");
    const std::string type = s.at("optimizer").at("type");
    LOCKSTEP_ENFORCE(type == opt.name(), ValueError, "the checkpoint's optimizer is ", type,
                     " but this job uses ", opt.name());
    const auto& groups = s.at("optimizer").at("param_groups");
    LOCKSTEP_ENFORCE(groups.size() == opt.paramGroups().size(), ValueError, "the checkpoint's optimizer has ",
                     groups.size(), " parameter groups, this job's ", opt.paramGroups().size());
    // The whole model's state ("<whole index>.<key>"), renumbered as this stage's optimizer.
    std::map<std::string, Tensor> whole;
    if (d.zero.is_null()) {
      for (const auto& [k, t] : d.optimizer) whole.emplace(k, t);
    } else {
      for (const auto& [k, t] :
           ZeroCheckpointReader(d).optimizerState([&](int64_t i) { return stage_indices.count(i) > 0; }))
        whole.emplace(k, t);
    }
    optim::OptimizerStateDict osd;
    int64_t j = 0;
    const std::vector<std::vector<autograd::Variable>> stage_groups = stageParamGroups(parts);
    for (size_t g = 0; g < stage_groups.size(); ++g) {
      optim::ParamGroupState gs{hyperFromJson(groups.at(g).at("options")), {}};
      for (const auto& p : stage_groups[g]) {
        const std::string prefix = std::to_string(parts.layout->index.at(p.impl().get())) + ".";
        for (auto it = whole.lower_bound(prefix); it != whole.end() && it->first.rfind(prefix, 0) == 0; ++it)
          osd.state.insert(std::to_string(j) + "." + it->first.substr(prefix.size()), it->second);
        gs.params.push_back(j++);
      }
      osd.param_groups.push_back(std::move(gs));
    }
    if (parts.zero)
      parts.zero->loadConsolidatedStateDict(osd);  // this replica's partition of it
    else
      opt.loadStateDict(osd);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(std::string("checkpoint state is malformed: ") + e.what());
  }
  return note;
}

}  // namespace lockstep::train
