#pragma once
// The one place that maps a name and hyper-parameters to an optimizer or an LR scheduler: the
// trainer's config, the training engine and error messages all read these tables. Names and keys
// are DeepSpeed's (`optimizer: {type, params}`, `scheduler: {type, params}`), with DeepSpeed's
// meaning: `type: Adam` is decoupled (AdamW) weight decay unless `adam_w_mode: false`, as in
// DeepSpeed's engine (docs/config.md has the details and where DeepSpeed says so).
// Adding an optimizer or a scheduler means adding one entry to registry.cpp.
//
// All functions are pure apart from what they build; thread-safe. Not collective.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/optim/lr_scheduler.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep::optim {

/// A config value: DeepSpeed's JSON/YAML scalars and number lists (betas).
using SpecValue = std::variant<bool, int64_t, double, std::string, std::vector<double>>;
using SpecParams = std::map<std::string, SpecValue>;

struct OptimizerSpec {
  std::string type = "Adam";  // a name from optimizerNames()
  SpecParams params;          // DeepSpeed's optimizer.params keys (lr, betas, eps, weight_decay, ...)
};

struct SchedulerSpec {
  std::string type;   // empty: constant learning rate; else a name from schedulerNames()
  SpecParams params;  // DeepSpeed's / PyTorch's scheduler.params keys
};

/// The optimizer types, as documented ("Adam", "AdamW", "SGD"). Adam and AdamW are also accepted
/// in any case, as DeepSpeed lower-cases its own optimizers' names; SGD comes from torch.optim by
/// its exact name in DeepSpeed, and so here.
std::vector<std::string> optimizerNames();
/// The scheduler types (exact names, as DeepSpeed looks them up).
std::vector<std::string> schedulerNames();

/// ValueError naming the key (as "optimizer.params.KEY" / "optimizer.type"), with the nearest known
/// key for a typo, for an unknown type, an unknown key, a wrong value type or an invalid value. Pure.
void validateOptimizerSpec(const OptimizerSpec& spec);
/// The same for "scheduler.type" / "scheduler.params.KEY". Pure.
void validateSchedulerSpec(const SchedulerSpec& spec);

/// The optimizer over `params` (one group); the errors of validateOptimizerSpec.
std::unique_ptr<Optimizer> makeOptimizer(const OptimizerSpec& spec, std::vector<autograd::Variable> params);
/// The scheduler driving `optimizer`, or nullptr for an empty type (constant learning rate).
/// total_steps fills WarmupDecayLR's total_num_steps when it is "auto". The errors of
/// validateSchedulerSpec.
std::unique_ptr<LRScheduler> makeScheduler(const SchedulerSpec& spec, Optimizer& optimizer,
                                           int64_t total_steps);

}  // namespace lockstep::optim
