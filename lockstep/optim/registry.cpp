// TEMPORARY (replaced by the optim helper's registry on merge).
#include "lockstep/optim/registry.h"

#include "lockstep/optim/adam.h"
#include "lockstep/optim/sgd.h"

namespace lockstep::optim {
namespace {
double num(const SpecParams& p, const char* k, double d) {
  auto it = p.find(k);
  if (it == p.end()) return d;
  if (auto* x = std::get_if<double>(&it->second)) return *x;
  if (auto* x = std::get_if<int64_t>(&it->second)) return static_cast<double>(*x);
  return d;
}
}  // namespace
std::vector<std::string> optimizerNames() { return {"Adam", "AdamW", "SGD"}; }
std::vector<std::string> schedulerNames() { return {}; }
void validateOptimizerSpec(const OptimizerSpec&) {}
void validateSchedulerSpec(const SchedulerSpec&) {}
std::unique_ptr<Optimizer> makeOptimizer(const OptimizerSpec& s, std::vector<autograd::Variable> params) {
  if (s.type == "SGD") {
    SGDOptions o;
    o.lr = num(s.params, "lr", o.lr);
    o.momentum = num(s.params, "momentum", 0);
    return std::make_unique<SGD>(std::move(params), o);
  }
  AdamOptions o;
  o.lr = num(s.params, "lr", o.lr);
  o.weight_decay = num(s.params, "weight_decay", 0);
  return std::make_unique<Adam>(std::move(params), o);
}
std::unique_ptr<LRScheduler> makeScheduler(const SchedulerSpec&, Optimizer&, int64_t) { return nullptr; }
}  // namespace lockstep::optim
