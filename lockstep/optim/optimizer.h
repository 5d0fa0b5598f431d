#pragma once
// Optimizer: the base of SGD/Adam/AdamW (torch.optim.Optimizer). Parameters live in groups, each
// with its own hyper-parameters (a name -> scalar map: "lr", "momentum", "beta1", ...) that
// schedulers and users may change between steps. Per-parameter state (momentum buffers, moments,
// step counts) is keyed by the parameter itself and saved by stateDict() under
// "<flat parameter index>.<key>", the index counting parameters across groups in order, as
// PyTorch's state_dict numbers them.
//
// Thread-safety: one thread steps an optimizer at a time. Not collective: every rank steps its
// own replica (DDP averages the gradients before step()).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "lockstep/autograd/variable.h"
#include "lockstep/nn/state_dict.h"

namespace lockstep::optim {

using autograd::Variable;
using nn::StateDict;

/// A JSON-able scalar: bool (nesterov, amsgrad, maximize), integer or real.
using HyperValue = std::variant<bool, int64_t, double>;
using HyperParams = std::map<std::string, HyperValue>;

/// The value as a double (bools as 0/1); ValueError naming the key when absent.
double hyperDouble(const HyperParams& h, const std::string& key);
bool hyperBool(const HyperParams& h, const std::string& key);

struct ParamGroup {
  std::vector<Variable> params;
  /// Every hyper-parameter of the optimizer for this group (defaults filled in).
  HyperParams options;

  double lr() const { return hyperDouble(options, "lr"); }
  void setLr(double lr) { options["lr"] = lr; }
};

/// The saved form of a group: its hyper-parameters and the flat indices of its parameters.
struct ParamGroupState {
  HyperParams options;
  std::vector<int64_t> params;
};

struct OptimizerStateDict {
  /// "<index>.<key>": "3.momentum_buffer", "3.exp_avg", "3.exp_avg_sq", "3.max_exp_avg_sq",
  /// "3.step" (0-d i64). Tensors alias the live state; clone() for a snapshot.
  StateDict state;
  std::vector<ParamGroupState> param_groups;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient (parameters without one are skipped).
  virtual void step() = 0;

  /// What ZeRO's host step folds into the update's own pass over memory (DeepSpeedCPUAdam's
  /// adam_update_copy, torch's fused Adam's grad_scale) instead of passes of their own.
  struct FusedStepExtras {
    /// Every gradient element multiplied by float(grad_scale) as it is read (the clipping
    /// coefficient); the gradients themselves are left as they are.
    double grad_scale = 1.0;
    /// A parameter's data pointer -> a dense host bf16/f16 tensor of its numel, written with its
    /// updated values rounded (f32 master weights into their 16-bit parameters). Parameters without
    /// a gradient are not stepped and their copies not written.
    std::unordered_map<const void*, Tensor> copies;
  };
  /// Whether stepFused() takes the extras for these parameters (Adam and AdamW: f32 host parameters).
  virtual bool stepsFused() const { return false; }
  /// step() with the extras, bitwise the separate passes' results: the gradients scaled first,
  /// the copies converted after. NotSupportedError unless stepsFused().
  virtual void stepFused(const FusedStepExtras& extras);
  /// Clears (set_to_none) or zero-fills the gradients of every parameter. Keep set_to_none false
  /// when gradients are views into communication buckets that must stay in place.
  void zeroGrad(bool set_to_none = true);

  /// Adds a group; `overrides` replaces some of the optimizer's defaults for it. ValueError on an
  /// unknown hyper-parameter name or a parameter already in another group.
  void addParamGroup(std::vector<Variable> params, const HyperParams& overrides = {});
  std::vector<ParamGroup>& paramGroups() { return groups_; }
  const std::vector<ParamGroup>& paramGroups() const { return groups_; }
  const HyperParams& defaults() const { return defaults_; }
  const std::string& name() const { return name_; }

  /// The keys of a stepped parameter's state in a group with these options, as stateDict() writes
  /// them after "<index>.": Adam's "step", "exp_avg", "exp_avg_sq" (and "max_exp_avg_sq" with
  /// amsgrad), SGD's "momentum_buffer" (none without momentum).
  virtual std::vector<std::string> stateKeys(const HyperParams& options) const = 0;
  /// ValueError naming `what` (one parameter's saved state) unless `keys`, the keys it has, are
  /// stateKeys(options): a state missing a moment or holding another optimizer's buffers would
  /// step on from zeros or be dropped without a word.
  void checkStateKeys(const HyperParams& options, const std::vector<std::string>& keys,
                      const std::string& what) const;
  /// A saved group's hyper-parameters as loadStateDict() takes them for group `group`: ValueError
  /// for a name this optimizer does not have (another optimizer's state); a name the saved ones
  /// lack keeps the group's value (one added since the state was written: torch's setdefault).
  HyperParams loadedOptions(size_t group, const HyperParams& saved) const;
  /// A saved "<index>.step" tensor as a step count: ValueError naming `key` unless it holds one
  /// whole number >= 1.
  int64_t loadedStep(const std::string& key, const Tensor& t) const;
  /// How many state elements step() keeps per parameter element of `group` (SGD with momentum 1,
  /// Adam 2, with amsgrad 3): the memory report's optimizer states before the first step creates
  /// them.
  int64_t stateElementsPerParameterElement(const ParamGroup& group) const;
  /// The dtype of the state tensors step() keeps for a parameter of dtype `param` in a group with
  /// these options: the parameter's (torch's zeros_like), or what the optimizer's options say
  /// (Adam's fp32_states). What loadStateDict casts loaded states to.
  virtual DType stateDType(const HyperParams& options, DType param) const { return param; }

  OptimizerStateDict stateDict() const;
  /// Restores hyper-parameters and per-parameter state (copied into new tensors laid out like the
  /// parameters, cast to their dtype). The group structure must match; ValueError naming the
  /// first difference otherwise, and while a CUDA graph holds a captured step (hasCapture(): its
  /// kernels would go on updating the old state tensors).
  void loadStateDict(const OptimizerStateDict& state);

  struct ParamState {
    int64_t step = 0;  // saved as "step" when positive
    std::map<std::string, Tensor> buffers;
  };
  /// The live state of p (of any Variable: it need not be in a group now), created empty on first
  /// use. step() creates a missing buffer and uses a present one as it is, so code that keeps the
  /// buffers' memory itself between steps can put them in before step() and take them out after
  /// (ZeRO's NVMe offload, parallel/zero/nvme_offload.h, which steps a few sub-groups at a time).
  ParamState& state(const Variable& p) { return state_[p.impl().get()]; }

  /// What step() changes on the host: the groups' hyper-parameters (a schedule's lr), which
  /// parameters have state, and their step counts. hostState() saves them, restoreHostState() puts
  /// them back and forgets the state of parameters that had none then (its buffers were made since),
  /// leaving the buffers' values alone: for a step whose device work never ran (a failed CUDA graph
  /// capture, parallel/step_graph.h).
  struct HostState {
    std::vector<HyperParams> groups;
    std::unordered_map<const autograd::VariableImpl*, int64_t> steps;
  };
  HostState hostState() const;
  void restoreHostState(const HostState& saved);

  /// CUDA graphs (parallel/step_graph.h). Between beginCapture() and endCapture() one step() is
  /// captured into a graph: its GPU updates then read their scalars (learning rate, bias
  /// corrections, the other hyper-parameters) from device memory instead of their launch
  /// parameters, which a graph would replay unchanged, and the optimizer records how to compute
  /// them for a later step. endCapture() writes the captured step's scalars there; replayStep()
  /// does the host side of one more step (advances the step counts as step() does) and writes its
  /// scalars, from the groups' hyper-parameters as they are then (an LR schedule's rate). Both
  /// queue the writes on the device's current stream and must be called outside the capture: a
  /// launch of the graph after each, on that stream, updates the parameters bit for bit as an eager
  /// step() would. ValueError from replayStep() when a hyper-parameter that decides the kernels'
  /// shape (maximize, nesterov, amsgrad, whether momentum or weight_decay is 0) changed since.
  void beginCapture();
  void endCapture();
  void replayStep();
  /// Forgets the capture (the graph failed or is destroyed); the next step() runs eagerly as ever.
  void discardCapture();
  bool capturing() const { return capturing_; }
  /// Whether a captured step() is recorded (endCapture() .. discardCapture()).
  bool hasCapture() const { return !capturing_ && !captured_.empty(); }

 protected:
  Optimizer(std::string name, HyperParams defaults, std::vector<Variable> params);
  /// A zero tensor laid out like p (for a new buffer), of p's dtype or `dtype`.
  static Tensor zerosLike(const Variable& p);
  static Tensor zerosLike(const Variable& p, DType dtype);
  /// For step(), per update call while capturing: device memory on `device` (the GPU every span
  /// of the call lives on) for the call's scalars, which endCapture() fills with `values` and each
  /// replayStep() with what `next()` returns (next advances the host state of the call's parameters
  /// as step() does, and computes the scalars). Returns nullptr when not capturing: the call then
  /// takes its scalars in its parameters.
  const double* captureUpdate(const Device& device, std::vector<double> values,
                              std::function<std::vector<double>()> next);

 private:
  struct CapturedUpdate {
    Tensor scalars;  // f64 on the GPU, read by the captured kernels
    std::vector<double> captured;
    std::function<std::vector<double>()> next;
  };

  std::string name_;
  HyperParams defaults_;
  std::vector<ParamGroup> groups_;
  std::unordered_map<const autograd::VariableImpl*, ParamState> state_;
  bool capturing_ = false;
  std::vector<CapturedUpdate> captured_;
};

namespace detail {
/// g laid out exactly like p (the same strides), copying only when it is not already.
Tensor gradLike(const Tensor& p, const Tensor& g);
/// NotSupportedError unless p is a dense floating tensor (f32, f64, bf16, f16: the 16-bit ones
/// stepped in f32 arithmetic, their states in their own dtype) the update kernels can walk flat.
void checkUpdatable(const Tensor& p, const char* optimizer);
/// ValueError while `optimizer` captures a step (Optimizer::beginCapture) in which p would get a new
/// state buffer `key`: its zero fill would be part of the graph and run again at every replay. The
/// steps before a capture make every buffer.
void checkNotCapturing(const Optimizer& optimizer, const Variable& p, const char* key);
/// The device of every span of one update call (spans not empty); ValueError when they differ (a
/// call captured in a CUDA graph reads its scalars from one GPU).
template <typename Span>
Device oneDevice(const std::vector<Span>& spans) {
  for (const Span& s : spans) {
    LOCKSTEP_ENFORCE(s.device == spans.front().device, ValueError,
                     "an optimizer step captured in a CUDA graph "
                     "must update parameters on one GPU, got ",
                     deviceName(spans.front().device), " and ", deviceName(s.device));
  }
  return spans.front().device;
}
}  // namespace detail

}  // namespace lockstep::optim
