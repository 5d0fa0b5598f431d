#pragma once
// TEMPORARY (replaced by the optim helper's registry on merge).
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "lockstep/optim/lr_scheduler.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep::optim {
using SpecValue = std::variant<bool, int64_t, double, std::string, std::vector<double>>;
using SpecParams = std::map<std::string, SpecValue>;
struct OptimizerSpec {
  std::string type = "Adam";
  SpecParams params;
};
struct SchedulerSpec {
  std::string type;
  SpecParams params;
};
std::vector<std::string> optimizerNames();
std::vector<std::string> schedulerNames();
void validateOptimizerSpec(const OptimizerSpec& spec);
void validateSchedulerSpec(const SchedulerSpec& spec);
std::unique_ptr<Optimizer> makeOptimizer(const OptimizerSpec& spec, std::vector<autograd::Variable> params);
std::unique_ptr<LRScheduler> makeScheduler(const SchedulerSpec& spec, Optimizer& optimizer, int64_t total_steps);
}  // namespace lockstep::optim
