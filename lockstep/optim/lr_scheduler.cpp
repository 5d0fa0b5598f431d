#include "lockstep/optim/lr_scheduler.h"

#include <algorithm>

namespace lockstep::optim {

LRScheduler::LRScheduler(Optimizer& optimizer, std::string counter_key, int64_t initial_counter)
    : optimizer_(optimizer), counter_key_(std::move(counter_key)), counter_(initial_counter) {
  for (const auto& g : optimizer_.paramGroups()) base_lrs_.push_back(g.lr());
}

void LRScheduler::apply() {
  auto& groups = optimizer_.paramGroups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) groups[i].setLr(lrAt(i, counter_));
}

void LRScheduler::step() {
  ++counter_;
  apply();
}

std::vector<double> LRScheduler::getLr() const {
  std::vector<double> out;
  for (size_t i = 0; i < base_lrs_.size(); ++i) out.push_back(lrAt(i, counter_));
  return out;
}

std::vector<double> LRScheduler::lastLr() const {
  std::vector<double> out;
  for (const auto& g : optimizer_.paramGroups()) out.push_back(g.lr());
  return out;
}

HyperParams LRScheduler::stateDict() const {
  HyperParams h{{counter_key_, counter_}};
  for (size_t i = 0; i < base_lrs_.size(); ++i) h["base_lrs." + std::to_string(i)] = base_lrs_[i];
  return h;
}

void LRScheduler::loadStateDict(const HyperParams& state) {
  auto it = state.find(counter_key_);
  LOCKSTEP_ENFORCE(it != state.end(), ValueError, "LRScheduler.loadStateDict: no '", counter_key_,
                   "' in the state");
  counter_ = static_cast<int64_t>(hyperDouble(state, counter_key_));
  for (size_t i = 0; i < base_lrs_.size(); ++i) {
    const std::string key = "base_lrs." + std::to_string(i);
    if (state.count(key)) base_lrs_[i] = hyperDouble(state, key);
  }
}

StepLR::StepLR(Optimizer& optimizer, const StepLROptions& options)
    : LRScheduler(optimizer, "last_epoch", 0), options_(options) {
  LOCKSTEP_ENFORCE(options.step_size > 0, ValueError, "StepLR: step_size must be positive, got ",
                   options.step_size);
  apply();
}
double StepLR::lrAt(size_t group, int64_t epoch) const {
  return stepLr(baseLrs()[group], epoch, options_.step_size, options_.gamma);
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, const MultiStepLROptions& options)
    : LRScheduler(optimizer, "last_epoch", 0), options_(options) {
  std::sort(options_.milestones.begin(), options_.milestones.end());
  apply();
}
double MultiStepLR::lrAt(size_t group, int64_t epoch) const {
  return multiStepLr(baseLrs()[group], epoch, options_.milestones, options_.gamma);
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, const CosineAnnealingLROptions& options)
    : LRScheduler(optimizer, "last_epoch", 0), options_(options) {
  LOCKSTEP_ENFORCE(options.t_max > 0, ValueError, "CosineAnnealingLR: T_max must be positive, got ",
                   options.t_max);
  apply();
}
double CosineAnnealingLR::lrAt(size_t group, int64_t epoch) const {
  return cosineAnnealingLr(baseLrs()[group], epoch, options_.t_max, options_.eta_min);
}

}  // namespace lockstep::optim
