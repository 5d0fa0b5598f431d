#include "lockstep/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "lockstep/kernels/optimizer.h"
#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/allocator.h"
#endif

namespace lockstep::optim {

double hyperDouble(const HyperParams& h, const std::string& key) {
  auto it = h.find(key);
  LOCKSTEP_ENFORCE(it != h.end(), ValueError, "optimizer hyper-parameter '", key, "' is not set");
  return std::visit([](auto v) { return static_cast<double>(v); }, it->second);
}

bool hyperBool(const HyperParams& h, const std::string& key) { return hyperDouble(h, key) != 0.0; }

Optimizer::Optimizer(std::string name, HyperParams defaults, std::vector<Variable> params)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  if (!params.empty()) addParamGroup(std::move(params));
}

void Optimizer::addParamGroup(std::vector<Variable> params, const HyperParams& overrides) {
  std::unordered_set<const autograd::VariableImpl*> seen;
  for (const auto& g : groups_) {
    for (const auto& p : g.params) seen.insert(p.impl().get());
  }
  for (const auto& p : params) {
    LOCKSTEP_ENFORCE(p.defined(), ValueError, name_, ": an undefined Variable was passed as a parameter");
    LOCKSTEP_ENFORCE(seen.insert(p.impl().get()).second, ValueError, name_, ": parameter '", p.name(),
                     "' appears in more than one place (each parameter may be in one group, once)");
  }
  ParamGroup g{std::move(params), defaults_};
  for (const auto& [k, v] : overrides) {
    LOCKSTEP_ENFORCE(defaults_.count(k) != 0, ValueError, name_, ": unknown hyper-parameter '", k, "'");
    g.options[k] = v;
  }
  groups_.push_back(std::move(g));
}

void Optimizer::stepFused(const FusedStepExtras&) {
  throw NotSupportedError(name() + " has no fused step (a gradient scale or a parameter copy in its update)");
}

void Optimizer::zeroGrad(bool set_to_none) {
  for (auto& g : groups_) {
    for (auto& p : g.params) p.zeroGrad(set_to_none);
  }
}

Optimizer::HostState Optimizer::hostState() const {
  HostState h;
  for (const ParamGroup& g : groups_) h.groups.push_back(g.options);
  for (const auto& [impl, st] : state_) h.steps.emplace(impl, st.step);
  return h;
}

void Optimizer::restoreHostState(const HostState& saved) {
  LOCKSTEP_CHECK(saved.groups.size() == groups_.size(), "Optimizer::restoreHostState: the groups changed",
                 saved.groups.size(), groups_.size());
  for (size_t i = 0; i < groups_.size(); ++i) groups_[i].options = saved.groups[i];
  for (auto it = state_.begin(); it != state_.end();) {
    auto was = saved.steps.find(it->first);
    if (was == saved.steps.end()) {
      it = state_.erase(it);
      continue;
    }
    it->second.step = was->second;
    ++it;
  }
}

namespace {
std::string joinKeys(const std::vector<std::string>& keys) {
  if (keys.empty()) return "no state";
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}
}  // namespace

void Optimizer::checkStateKeys(const HyperParams& options, const std::vector<std::string>& keys,
                               const std::string& what) const {
  const std::vector<std::string> wanted = stateKeys(options);
  for (const std::string& k : wanted)
    LOCKSTEP_ENFORCE(std::find(keys.begin(), keys.end(), k) != keys.end(), ValueError, name_, ": ", what,
                     " has no '", k, "' (", name_, " keeps ", joinKeys(wanted),
                     " for every parameter it has stepped): the checkpoint is incomplete or not this "
                     "optimizer's; resume from another checkpoint or start without its optimizer state");
  for (const std::string& k : keys)
    LOCKSTEP_ENFORCE(std::find(wanted.begin(), wanted.end(), k) != wanted.end(), ValueError, name_, ": ",
                     what, " holds '", k, "', which ", name_, " with these options does not keep (it keeps ",
                     joinKeys(wanted),
                     "): the checkpoint is another optimizer's or was saved with other options");
}

HyperParams Optimizer::loadedOptions(size_t group, const HyperParams& saved) const {
  HyperParams out = groups_.at(group).options;
  for (const auto& [k, v] : saved) {
    auto d = defaults_.find(k);
    LOCKSTEP_ENFORCE(d != defaults_.end(), ValueError, name_, ".loadStateDict: group ", group,
                     " of the state has hyper-parameter '", k, "', which ", name_,
                     " does not have: the state is another optimizer's");
    const bool flag = std::holds_alternative<bool>(d->second);
    LOCKSTEP_ENFORCE(std::holds_alternative<bool>(v) == flag, ValueError, name_, ".loadStateDict: group ",
                     group, " of the state has hyper-parameter '", k, "' as a ", flag ? "number" : "bool",
                     "; it is a ", flag ? "bool (true or false)" : "number");
    out[k] = v;
  }
  return out;
}

int64_t Optimizer::loadedStep(const std::string& key, const Tensor& t) const {
  // One whole number >= 1 (torch keeps it as a float tensor; lockstep as an i64 one).
  const double step = t.numel() == 1 ? t.item<double>() : 0.0;
  LOCKSTEP_ENFORCE(step >= 1 && step <= 9.0e15 && step == std::floor(step), ValueError, name_,
                   ".loadStateDict: state key '", key,
                   "' is not a step count (one whole number >= 1; it has ", t.numel(), " element(s)",
                   t.numel() == 1 ? ::lockstep::detail::concat(", ", step) : "", ")");
  return static_cast<int64_t>(step);
}

int64_t Optimizer::stateElementsPerParameterElement(const ParamGroup& group) const {
  const std::vector<std::string> keys = stateKeys(group.options);
  return static_cast<int64_t>(
      std::count_if(keys.begin(), keys.end(), [](const std::string& k) { return k != "step"; }));
}

Tensor Optimizer::zerosLike(const Variable& p) { return zerosLike(p, p.dtype()); }

Tensor Optimizer::zerosLike(const Variable& p, DType dtype) {
  Tensor t = Tensor::emptyLike(p.tensor(), dtype);
  t.zero();
  return t;
}

OptimizerStateDict Optimizer::stateDict() const {
  OptimizerStateDict out;
  int64_t index = 0;
  for (const auto& g : groups_) {
    ParamGroupState gs{g.options, {}};
    for (const auto& p : g.params) {
      gs.params.push_back(index);
      auto it = state_.find(p.impl().get());
      if (it != state_.end()) {
        const std::string prefix = std::to_string(index) + ".";
        if (it->second.step > 0)
          out.state.insert(prefix + "step", Tensor::scalar(static_cast<double>(it->second.step), DType::i64));
        for (const auto& [k, t] : it->second.buffers) out.state.insert(prefix + k, t);
      }
      ++index;
    }
    out.param_groups.push_back(std::move(gs));
  }
  return out;
}

void Optimizer::loadStateDict(const OptimizerStateDict& sd) {
  LOCKSTEP_ENFORCE(captured_.empty(), ValueError, name_,
                   ".loadStateDict: a CUDA graph holds a captured step of this optimizer (its kernels would "
                   "go on updating the old state); load the state before capturing the step");
  LOCKSTEP_ENFORCE(sd.param_groups.size() == groups_.size(), ValueError, name_,
                   ".loadStateDict: the state has ", sd.param_groups.size(),
                   " parameter groups, the optimizer ", groups_.size());
  std::vector<const Variable*> flat;
  std::vector<size_t> group_of;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    LOCKSTEP_ENFORCE(sd.param_groups[gi].params.size() == groups_[gi].params.size(), ValueError, name_,
                     ".loadStateDict: group ", gi, " has ", sd.param_groups[gi].params.size(),
                     " parameters in the state, ", groups_[gi].params.size(), " in the optimizer");
    for (const auto& p : groups_[gi].params) {
      flat.push_back(&p);
      group_of.push_back(gi);
    }
  }
  // Validate everything before changing anything.
  std::vector<HyperParams> options(groups_.size());
  for (size_t gi = 0; gi < groups_.size(); ++gi) options[gi] = loadedOptions(gi, sd.param_groups[gi].options);
  std::unordered_map<const autograd::VariableImpl*, ParamState> loaded;
  for (const auto& [key, t] : sd.state) {
    const size_t dot = key.find('.');
    int64_t index = -1;
    try {
      index = dot == std::string::npos ? -1 : std::stoll(key.substr(0, dot));
    } catch (const std::exception&) {
      index = -1;
    }
    LOCKSTEP_ENFORCE(index >= 0 && index < static_cast<int64_t>(flat.size()), ValueError, name_,
                     ".loadStateDict: state key '", key, "' does not name one of the ", flat.size(),
                     " parameters");
    const Variable& p = *flat[static_cast<size_t>(index)];
    const std::string what = key.substr(dot + 1);
    ParamState& ps = loaded[p.impl().get()];
    if (what == "step") {
      ps.step = loadedStep(key, t);
      continue;
    }
    LOCKSTEP_ENFORCE(t.shape() == p.shape(), ValueError, name_, ".loadStateDict: '", key, "' has shape ",
                     shapeToString(t.shape()), " but the parameter has ", shapeToString(p.shape()));
    // In the dtype the loaded options keep states in (Adam's fp32_states), laid out as the parameter.
    Tensor copy = zerosLike(p, stateDType(options[group_of[static_cast<size_t>(index)]], p.dtype()));
    copy.copyFrom(t);
    ps.buffers[what] = copy;
  }
  for (size_t i = 0; i < flat.size(); ++i) {
    auto it = loaded.find(flat[i]->impl().get());
    if (it == loaded.end()) continue;  // never stepped (no gradient yet): no state, as in torch
    std::vector<std::string> keys;
    if (it->second.step > 0) keys.push_back("step");
    for (const auto& [k, t] : it->second.buffers) keys.push_back(k);
    checkStateKeys(options[group_of[i]], keys, "the state of parameter " + std::to_string(i));
  }
  for (size_t gi = 0; gi < groups_.size(); ++gi) groups_[gi].options = std::move(options[gi]);
  state_ = std::move(loaded);
}

void Optimizer::beginCapture() {
  LOCKSTEP_ENFORCE(!capturing_ && captured_.empty(), ValueError, name_,
                   ".beginCapture: a step of this optimizer is already captured (discardCapture() first)");
  capturing_ = true;
}

void Optimizer::endCapture() {
  LOCKSTEP_ENFORCE(capturing_, ValueError, name_, ".endCapture: no capture was begun");
  capturing_ = false;
  for (const CapturedUpdate& u : captured_) kernels::writeScalars(u.scalars, u.captured);
}

void Optimizer::replayStep() {
  LOCKSTEP_ENFORCE(hasCapture(), ValueError, name_, ".replayStep: no step of this optimizer is captured");
  // Every call's scalars first, then the writes: a ValueError leaves the device side untouched.
  std::vector<std::vector<double>> values;
  values.reserve(captured_.size());
  for (const CapturedUpdate& u : captured_) values.push_back(u.next());
  for (size_t i = 0; i < captured_.size(); ++i) kernels::writeScalars(captured_[i].scalars, values[i]);
}

void Optimizer::discardCapture() {
  capturing_ = false;
  captured_.clear();
}

const double* Optimizer::captureUpdate(const Device& device, std::vector<double> values,
                                       std::function<std::vector<double>()> next) {
  if (!capturing_) return nullptr;
  LOCKSTEP_ENFORCE(device.isCuda(), ValueError, name_,
                   ": a step captured into a CUDA graph must update GPU "
                   "parameters, got ones on ",
                   deviceName(device));
  Tensor scalars;
  {
#if LOCKSTEP_WITH_CUDA
    // Not from the graph's pool: the host writes these between replays, and a pool block may be
    // one a temporary of this very step used before, which each replay would overwrite after the
    // write (the updates then read garbage: the H200 run's graph losses went to NaN).
    cuda::PoolPause outside_the_graph(device.index);
#endif
    scalars =
        Tensor::empty({static_cast<int64_t>(values.size())}, DType::f64, MemoryFormat::contiguous, device);
  }
  captured_.push_back({scalars, std::move(values), std::move(next)});
  return static_cast<const double*>(scalars.devicePtr());
}

namespace detail {
Tensor gradLike(const Tensor& p, const Tensor& g) {
  LOCKSTEP_ENFORCE(g.shape() == p.shape(), ValueError, "gradient shape ", shapeToString(g.shape()),
                   " differs from the parameter's ", shapeToString(p.shape()));
  if (g.dtype() == p.dtype() && g.strides() == p.strides() && g.isDense()) return g;
  Tensor out = Tensor::emptyLike(p);
  out.copyFrom(g);
  return out;
}

void checkNotCapturing(const Optimizer& optimizer, const Variable& p, const char* key) {
  LOCKSTEP_ENFORCE(!optimizer.capturing(), ValueError, optimizer.name(), ": parameter '", p.name(),
                   "' gets its first gradient in the step being captured in a CUDA graph, and its new ", key,
                   " would be zeroed again at every replay; run more eager steps before capturing "
                   "(every parameter must have been stepped once)");
}

void checkUpdatable(const Tensor& p, const char* optimizer) {
  LOCKSTEP_ENFORCE(isFloating(p.dtype()), NotSupportedError, optimizer,
                   " supports f32, f64, bf16 and f16 parameters, got ", dtypeName(p.dtype()));
  LOCKSTEP_ENFORCE(p.isDense(), NotSupportedError, optimizer, " needs dense parameters, got strides ",
                   shapeToString(p.strides()), " for shape ", shapeToString(p.shape()));
}
}  // namespace detail

}  // namespace lockstep::optim
