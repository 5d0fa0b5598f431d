#include "lockstep/train/checkpoint/training_state.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <set>
#include <unordered_map>

#include "lockstep/parallel/engine.h"
#include "lockstep/train/checkpoint/zero_checkpoint.h"
#include "lockstep/util/error.h"
#include "lockstep/util/json.h"

namespace lockstep::train {

nlohmann::json hyperToJson(const optim::HyperParams& h) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : h) std::visit([&, &key = k](auto x) { j[key] = x; }, v);
  return j;
}

optim::HyperParams hyperFromJson(const nlohmann::json& j) {
  optim::HyperParams h;
  for (const auto& [k, v] : j.items()) {
    if (v.is_boolean()) {
      h[k] = v.get<bool>();
    } else if (v.is_number_integer()) {
      h[k] = v.get<int64_t>();
    } else if (v.is_number()) {
      h[k] = v.get<double>();
    } else {
      throw IoError("checkpoint state: hyper-parameter '" + k + "' is " + json::excerpt(v) +
                    ", not a number or a bool (state.json is corrupt)");
    }
  }
  return h;
}

namespace {

// The tensors alias the live ones: written before training changes them, they need no copy.
NamedTensors toNamed(const nn::StateDict& sd) {
  NamedTensors out;
  for (const auto& [name, t] : sd) out.emplace_back(name, t);
  return out;
}

nn::StateDict fromNamed(const NamedTensors& tensors) {
  nn::StateDict sd;
  for (const auto& [name, t] : tensors) sd.insert(name, t);
  return sd;
}

}  // namespace

CheckpointData captureTrainingState(const TrainingParts& parts, int64_t step) {
  LOCKSTEP_ENFORCE(parts.model != nullptr, ValueError, "captureTrainingState: no model");
  CheckpointData d;
  d.step = step;
  nn::StateDict model = parts.model->stateDict();
  if (parts.zero) {  // the parameters go into the ranks' partition files
    for (const auto& [name, p] : parts.model->namedParameters()) model.erase(name);
  }
  d.model = toNamed(model);
  nlohmann::json state = nlohmann::json::object();
  if (parts.optimizer) {
    optim::OptimizerStateDict osd = parts.optimizer->stateDict();
    if (parts.zero) {  // groups in the whole model's parameter numbering; no tensors
      const auto& groups = parts.zero->groupParameters();
      for (size_t g = 0; g < osd.param_groups.size() && g < groups.size(); ++g)
        osd.param_groups[g].params = groups[g];
      osd.state = {};
    }
    d.optimizer = toNamed(osd.state);
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : osd.param_groups)
      groups.push_back({{"options", hyperToJson(g.options)}, {"params", g.params}});
    state["optimizer"] = {{"type", parts.optimizer->name()}, {"param_groups", groups}};
  }
  if (parts.scheduler) state["scheduler"] = hyperToJson(parts.scheduler->stateDict());
  if (parts.loss_scaler) state["loss_scaler"] = hyperToJson(parts.loss_scaler->stateDict());
  if (parts.loader) {
    state["data"] = parts.loader->state().toJson();
    state["data"]["world_size"] = parts.world_size;
    state["data"]["batch_size"] = parts.loader->options().batch_size;
  }
  if (parts.rng) state["rng"] = {{"seed", parts.rng->seed()}, {"offset", parts.rng->offset()}};
  d.config = parts.config;
  state["global_step"] = step;
  d.state = std::move(state);
  return d;
}

namespace {

// The loader position of this job that follows the samples a snapshot's job had consumed.
data::SamplerState rescalePosition(const nlohmann::json& j, const TrainingParts& parts, std::string* note) {
  data::SamplerState st = data::SamplerState::fromJson(j);
  const int64_t world = j.value("world_size", parts.world_size);
  const int64_t batch = j.value("batch_size", parts.loader->options().batch_size);
  LOCKSTEP_ENFORCE(world >= 1 && batch >= 1, ValueError, "checkpoint data state: bad world_size ", world,
                   " or batch_size ", batch, " in ", j.dump());
  const int64_t now_world = parts.world_size, now_batch = parts.loader->options().batch_size;
  if (st.position == 0 || (world == now_world && batch == now_batch)) return st;
  int64_t job = 0, consumed = 0;  // samples per step of the saved job, and consumed this epoch
  LOCKSTEP_ENFORCE(st.position >= 0 && !__builtin_mul_overflow(batch, world, &job) &&
                       !__builtin_mul_overflow(st.position, job, &consumed),
                   ValueError, "checkpoint data state: bad position ", st.position, " in ", j.dump());
  const int64_t per_step = now_batch * now_world;
  const int64_t position = std::min(consumed / per_step, parts.loader->size());
  *note = ::lockstep::detail::concat(
      "the checkpoint was written by a job of world size ", world, " and batch size ", batch, " per rank, ",
      st.position, " batches into epoch ", st.epoch, " (", consumed,
      " samples of the epoch's order); this job (world size ", now_world, ", batch size ", now_batch,
      ") resumes at batch ", position, " of that epoch",
      consumed % per_step == 0 ? ""
                               : ::lockstep::detail::concat(", seeing ", consumed - position * per_step,
                                                            " of the consumed samples again"));
  st.position = position;
  return st;
}

}  // namespace

std::string restoreTrainingState(const CheckpointData& d, TrainingParts& parts) {
  std::string note;
  LOCKSTEP_ENFORCE(parts.model != nullptr, ValueError, "restoreTrainingState: no model");
  std::optional<ZeroCheckpointReader> partitioned;
  const auto wanted = [&](const std::string& key) {
    return !parts.model_keys || parts.model_keys(parts.model->currentKey(key));
  };
  nn::StateDict model;
  for (const auto& [name, t] : d.model)
    if (wanted(name)) model.insert(name, t);
  if (!d.zero.is_null()) {
    partitioned.emplace(d);
    for (auto& [name, t] : partitioned->parameters(wanted)) model.insert(name, std::move(t));
  }
  if (parts.model_keys) {
    std::vector<std::string> missing;
    for (const auto& [key, t] : parts.model->stateDict())
      if (parts.model_keys(key) && !model.contains(key)) missing.push_back(key);
    LOCKSTEP_ENFORCE(missing.empty(), ValueError, "checkpoint '", d.path, "' lacks ", missing.size(),
                     " of the tensors this rank loads, the first '", missing.front(), "'");
  }
  parts.model->loadStateDict(model, /*strict=*/!parts.model_keys);
  // ZeRO below stage 3: the partition's values the optimizer steps (f32 master weights, ZeRO-
  // Offload's host copies) from the checkpoint's values themselves, not from the parameters just
  // loaded (with master weights their rounding): the resumed run steps what the saved one did.
  if (parts.zero && parts.zero->stage() < 3) {
    std::unordered_map<std::string, const Tensor*> saved;  // by the model's current names
    for (const auto& [name, t] : model) saved.emplace(parts.model->currentKey(name), &t);
    const auto& names = parts.zero->parameterNames();
    std::vector<size_t> all(names.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    autograd::NoGradGuard ng;
    parts.zero->adoptParameters(all, [&](size_t i) {
      auto it = saved.find(names[i]);
      return it != saved.end() ? *it->second : parts.zero->parameters()[i].tensor();
    });
  }
  const nlohmann::json& s = d.state;
  try {
    if (parts.optimizer) {
      LOCKSTEP_ENFORCE(s.contains("optimizer"), ValueError, "the checkpoint holds no optimizer state");
      std::string type = s.at("optimizer").at("type");
      LOCKSTEP_ENFORCE(type == parts.optimizer->name(), ValueError, "the checkpoint's optimizer is ", type,
                       " but this job uses ", parts.optimizer->name());
      optim::OptimizerStateDict osd;
      if (!partitioned) {
        osd.state = fromNamed(d.optimizer);
      } else if (parts.zero) {  // this rank's elements only
        osd.state = partitioned->partitionState(*parts.zero, *parts.model);
      } else {
        osd.state = partitioned->optimizerState();
      }
      for (const auto& g : s.at("optimizer").at("param_groups")) {
        osd.param_groups.push_back(
            {hyperFromJson(g.at("options")), g.at("params").get<std::vector<int64_t>>()});
      }
      // The groups' parameter indices: each of 0 .. N-1 once (a state's keys are numbered by them).
      std::vector<int64_t> indices;
      for (const auto& g : osd.param_groups) indices.insert(indices.end(), g.params.begin(), g.params.end());
      std::sort(indices.begin(), indices.end());
      for (size_t i = 0; i < indices.size(); ++i)
        LOCKSTEP_ENFORCE(indices[i] == static_cast<int64_t>(i), IoError, "checkpoint '", d.path,
                         "': the optimizer's parameter groups do not number the parameters 0 to ",
                         indices.size() - 1, " once each (state.json is corrupt)");
      if (parts.zero && partitioned) {
        parts.zero->loadPartitionStateDict(osd);
      } else if (parts.zero) {
        parts.zero->loadConsolidatedStateDict(osd);
      } else {
        parts.optimizer->loadStateDict(osd);
      }
    }
    if (parts.scheduler && s.contains("scheduler"))
      parts.scheduler->loadStateDict(hyperFromJson(s.at("scheduler")));
    // A checkpoint of an fp32 run resumed in fp16 starts the scaler afresh; one with a scaler
    // resumed without one drops it (the weights are f32 either way).
    if (parts.loss_scaler && s.contains("loss_scaler"))
      parts.loss_scaler->loadStateDict(hyperFromJson(s.at("loss_scaler")));
    if (parts.loader && s.contains("data"))
      parts.loader->loadState(rescalePosition(s.at("data"), parts, &note));
    if (parts.rng && s.contains("rng")) parts.rng->setState(s.at("rng").at("seed"), s.at("rng").at("offset"));
  } catch (const nlohmann::json::exception& e) {
    throw IoError(std::string("checkpoint state is malformed: ") + e.what());
  }
  return note;
}

void saveModel(const std::string& path, const nn::Module& model) {
  saveSafetensors(path, toNamed(model.stateDict()), {{"format", "pt"}});
}

void saveModel(const std::string& path, parallel::Engine& engine, bool write) {
  const nn::Module& model = *engine.model();
  if (engine.parametersWhole()) {
    if (write) saveModel(path, model);
    return;
  }
  std::unordered_map<const autograd::VariableImpl*, std::string> name_of;
  for (const auto& [name, p] : model.namedParameters()) name_of.emplace(p.impl().get(), name);
  const NamedTensors layout = toNamed(model.stateDict());  // shapes and dtypes only are read here
  std::optional<SafetensorsStreamWriter> out;
  std::exception_ptr error;  // the walk is collective: every rank takes all of it, then this throws
  if (write) {
    try {
      out.emplace(path, layout, std::map<std::string, std::string>{{"format", "pt"}});
    } catch (...) {
      error = std::current_exception();
    }
  }
  std::set<std::string> streamed;  // what the walk brings; the rest (buffers) is whole already
  engine.forEachWholeParameterBucket([&](const std::vector<autograd::Variable>& bucket) {
    for (const autograd::Variable& p : bucket) {
      auto it = name_of.find(p.impl().get());
      LOCKSTEP_CHECK(it != name_of.end(), "saveModel: an engine's parameter is not its model's");
      streamed.insert(it->second);
      if (out) out->write(it->second, p.tensor());
    }
  });
  if (error) std::rethrow_exception(error);
  if (!out) return;
  for (const auto& [name, t] : layout) {  // buffers (and parameters the optimizer does not train)
    if (!streamed.count(name)) out->write(name, t);
  }
  out->commit();
}

void loadModel(const std::string& path, nn::Module& model, bool strict) {
  model.loadStateDict(fromNamed(loadSafetensors(path).tensors), strict);
}

}  // namespace lockstep::train
