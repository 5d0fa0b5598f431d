// The optimizer and scheduler registry: names and params (DeepSpeed's) to objects with the right
// options, DeepSpeed's Adam semantics (decoupled weight decay unless adam_w_mode is false), and
// errors that name the key.
#include "lockstep/optim/registry.h"

#include <gtest/gtest.h>

#include <cstring>

#include "lockstep/optim.h"

using namespace lockstep;
using namespace lockstep::optim;
using autograd::Variable;

namespace {

std::vector<Variable> someParams() {
  return {Variable(Tensor::fromVector<double>({0.5, -1.0, 2.0, 0.25}, {2, 2}), true),
          Variable(Tensor::fromVector<double>({0.1, -0.3, 0.7}, {3}), true)};
}

// Five steps of grad = p - t on a copy of someParams(); the parameters' bytes after.
std::vector<double> trained(const std::function<std::unique_ptr<Optimizer>(std::vector<Variable>)>& make) {
  auto params = someParams();
  auto opt = make(params);
  for (int s = 0; s < 5; ++s) {
    for (auto& p : params) {
      auto v = p.tensor().toVector<double>();
      for (auto& x : v) x = x - 0.3;
      p.setGrad(Tensor::fromVector<double>(v, p.shape()));
    }
    opt->step();
  }
  auto out = params[0].tensor().toVector<double>(), b = params[1].tensor().toVector<double>();
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

bool sameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

double option(const Optimizer& opt, const std::string& key) { return hyperDouble(opt.defaults(), key); }

std::string optimizerError(const OptimizerSpec& spec) {
  std::string from_validate = "(no error)", from_make = "(no error)";
  try {
    validateOptimizerSpec(spec);
  } catch (const ValueError& e) {
    from_validate = e.what();
  }
  try {
    makeOptimizer(spec, someParams());
  } catch (const ValueError& e) {
    from_make = e.what();
  }
  EXPECT_EQ(from_validate, from_make) << "validate and make disagree";
  return from_validate;
}

std::string schedulerError(const SchedulerSpec& spec) {
  std::string from_validate = "(no error)", from_make = "(no error)";
  try {
    validateSchedulerSpec(spec);
  } catch (const ValueError& e) {
    from_validate = e.what();
  }
  try {
    auto opt = makeOptimizer({}, someParams());
    makeScheduler(spec, *opt, 100);
  } catch (const ValueError& e) {
    from_make = e.what();
  }
  EXPECT_EQ(from_validate, from_make) << "validate and make disagree";
  return from_validate;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Registry, lists_every_optimizer_and_scheduler) {
  EXPECT_EQ(optimizerNames(), (std::vector<std::string>{"Adam", "AdamW", "SGD"}));
  EXPECT_EQ(schedulerNames(), (std::vector<std::string>{"WarmupLR", "WarmupDecayLR", "StepLR", "MultiStepLR",
                                                        "CosineAnnealingLR"}));
  for (const auto& name : optimizerNames()) {
    EXPECT_NO_THROW(validateOptimizerSpec({name, {}})) << name;
  }
  for (const auto& name : schedulerNames()) {
    SpecParams p;
    if (name == "MultiStepLR") p["milestones"] = std::vector<double>{2};
    // The arguments DeepSpeed's WarmupDecayLR and torch's StepLR and CosineAnnealingLR require.
    if (name == "WarmupDecayLR") p["total_num_steps"] = int64_t{10};
    if (name == "StepLR") p["step_size"] = int64_t{2};
    if (name == "CosineAnnealingLR") p["T_max"] = int64_t{4};
    EXPECT_NO_THROW(validateSchedulerSpec({name, p})) << name;
  }
}

TEST(Registry, makes_each_optimizer_with_the_given_options) {
  auto sgd = makeOptimizer({"SGD",
                            {{"lr", 0.1},
                             {"momentum", 0.9},
                             {"dampening", int64_t{0}},
                             {"weight_decay", 1e-4},
                             {"nesterov", true}}},
                           someParams());
  EXPECT_EQ(sgd->name(), "SGD");
  EXPECT_EQ(option(*sgd, "lr"), 0.1);
  EXPECT_EQ(option(*sgd, "momentum"), 0.9);
  EXPECT_EQ(option(*sgd, "dampening"), 0.0);
  EXPECT_EQ(option(*sgd, "weight_decay"), 1e-4);
  EXPECT_TRUE(hyperBool(sgd->defaults(), "nesterov"));
  EXPECT_EQ(sgd->paramGroups().at(0).params.size(), 2u);

  auto adam = makeOptimizer({"Adam",
                             {{"lr", 0.01},
                              {"betas", std::vector<double>{0.8, 0.99}},
                              {"eps", 1e-6},
                              {"weight_decay", 0.1},
                              {"adam_w_mode", false},
                              {"bias_correction", false}}},
                            someParams());
  EXPECT_EQ(adam->name(), "Adam");
  EXPECT_EQ(option(*adam, "lr"), 0.01);
  EXPECT_EQ(option(*adam, "beta1"), 0.8);
  EXPECT_EQ(option(*adam, "beta2"), 0.99);
  EXPECT_EQ(option(*adam, "eps"), 1e-6);
  EXPECT_EQ(option(*adam, "weight_decay"), 0.1);
  EXPECT_FALSE(hyperBool(adam->defaults(), "amsgrad"));
  EXPECT_FALSE(hyperBool(adam->defaults(), "bias_correction"));
  // AMSGrad only with torch's Adam, as DeepSpeed (FusedAdam and DeepSpeedCPUAdam refuse it).
  auto ams = makeOptimizer({"Adam", {{"amsgrad", true}, {"torch_adam", true}}}, someParams());
  EXPECT_TRUE(hyperBool(ams->defaults(), "amsgrad"));
  const std::string ams_error = optimizerError({"AdamW", {{"amsgrad", true}}});
  EXPECT_TRUE(has(ams_error, "optimizer.params.amsgrad: true needs torch_adam: true")) << ams_error;

  auto adamw = makeOptimizer({"AdamW", {{"lr", int64_t{1}}, {"weight_decay", 0.05}}}, someParams());
  EXPECT_EQ(adamw->name(), "AdamW");
  EXPECT_EQ(option(*adamw, "lr"), 1.0);
  EXPECT_EQ(option(*adamw, "weight_decay"), 0.05);
}

TEST(Registry, defaults_are_deepspeeds) {
  // Adam and AdamW build DeepSpeed's FusedAdam (weight_decay 0, adam_w_mode true) unless
  // torch_adam, which builds torch.optim.Adam or AdamW (AdamW's weight_decay: 1e-2).
  struct Case {
    OptimizerSpec spec;
    std::string name;
    double weight_decay;
  };
  const std::vector<Case> cases = {
      {{"Adam", {}}, "AdamW", 0.0},
      {{"AdamW", {}}, "AdamW", 0.0},
      {{"Adam", {{"adam_w_mode", false}}}, "Adam", 0.0},
      {{"Adam", {{"torch_adam", true}}}, "AdamW", 1e-2},
      {{"AdamW", {{"torch_adam", true}}}, "AdamW", 1e-2},
      {{"Adam", {{"torch_adam", true}, {"adam_w_mode", false}}}, "Adam", 0.0},
      {{"AdamW", {{"torch_adam", true}, {"weight_decay", 0.3}}}, "AdamW", 0.3},
  };
  for (const auto& c : cases) {
    auto opt = makeOptimizer(c.spec, someParams());
    SCOPED_TRACE(c.spec.type + " -> " + c.name);
    EXPECT_EQ(opt->name(), c.name);
    EXPECT_EQ(option(*opt, "weight_decay"), c.weight_decay);
    EXPECT_EQ(option(*opt, "lr"), 1e-3);
    EXPECT_EQ(option(*opt, "beta1"), 0.9);
    EXPECT_EQ(option(*opt, "beta2"), 0.999);
    EXPECT_EQ(option(*opt, "eps"), 1e-8);
    EXPECT_FALSE(hyperBool(opt->defaults(), "amsgrad"));
  }
  auto sgd = makeOptimizer({"SGD", {}}, someParams());
  EXPECT_EQ(option(*sgd, "lr"), 1e-3);
  EXPECT_EQ(option(*sgd, "momentum"), 0.0);
  EXPECT_EQ(option(*sgd, "weight_decay"), 0.0);
  EXPECT_FALSE(hyperBool(sgd->defaults(), "nesterov"));
  EXPECT_EQ(makeOptimizer({}, someParams())->name(), "AdamW");  // the spec's default type: Adam
}

TEST(Registry, adam_weight_decay_is_decoupled_unless_adam_w_mode_is_false) {
  AdamOptions o;
  o.lr = 0.05;
  o.weight_decay = 0.1;
  AdamWOptions w;
  w.lr = 0.05;
  w.weight_decay = 0.1;
  const auto explicit_adamw = trained([&](auto ps) { return std::make_unique<AdamW>(ps, w); });
  const auto explicit_l2 = trained([&](auto ps) { return std::make_unique<Adam>(ps, o); });
  ASSERT_FALSE(sameBits(explicit_adamw, explicit_l2));
  const SpecParams p = {{"lr", 0.05}, {"weight_decay", 0.1}};
  auto with = [&](std::string type, SpecParams extra) {
    SpecParams all = p;
    all.insert(extra.begin(), extra.end());
    return trained([&](auto ps) { return makeOptimizer({type, all}, ps); });
  };
  EXPECT_TRUE(sameBits(with("Adam", {}), explicit_adamw));
  EXPECT_TRUE(sameBits(with("Adam", {{"adam_w_mode", true}}), explicit_adamw));
  EXPECT_TRUE(sameBits(with("Adam", {{"torch_adam", true}}), explicit_adamw));
  EXPECT_TRUE(sameBits(with("AdamW", {}), explicit_adamw));
  EXPECT_TRUE(sameBits(with("AdamW", {{"adam_w_mode", true}}), explicit_adamw));
  EXPECT_TRUE(sameBits(with("Adam", {{"adam_w_mode", false}}), explicit_l2));
  EXPECT_TRUE(sameBits(with("Adam", {{"adam_w_mode", false}, {"torch_adam", true}}), explicit_l2));
}

TEST(Registry, type_names_follow_deepspeeds_case_rules) {
  // DeepSpeed lower-cases the names of its own optimizers (Adam, AdamW) and takes SGD from
  // torch.optim by its exact name.
  EXPECT_EQ(makeOptimizer({"adam", {{"adam_w_mode", false}}}, someParams())->name(), "Adam");
  EXPECT_EQ(makeOptimizer({"ADAMW", {}}, someParams())->name(), "AdamW");
  EXPECT_EQ(makeOptimizer({"adamw", {}}, someParams())->name(), "AdamW");
  std::string e = optimizerError({"sgd", {}});
  EXPECT_TRUE(has(e, "optimizer.type: sgd is not supported yet") && has(e, "did you mean SGD?")) << e;
  e = schedulerError({"steplr", {}});
  EXPECT_TRUE(has(e, "scheduler.type: steplr") && has(e, "did you mean StepLR?")) << e;
}

TEST(Registry, makes_each_scheduler_with_the_given_options) {
  auto opt = makeOptimizer({"SGD", {{"lr", 0.1}}}, someParams());
  EXPECT_EQ(makeScheduler({}, *opt, 100), nullptr);

  auto warm = makeScheduler({"WarmupLR",
                             {{"warmup_min_lr", 0.01},
                              {"warmup_max_lr", 0.2},
                              {"warmup_num_steps", int64_t{10}},
                              {"warmup_type", std::string("linear")}}},
                            *opt, 100);
  auto* w = dynamic_cast<WarmupLR*>(warm.get());
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->options().warmup_min_lr, 0.01);
  EXPECT_EQ(w->options().warmup_max_lr, 0.2);
  EXPECT_EQ(w->options().warmup_num_steps, 10);
  EXPECT_EQ(w->options().warmup_type, WarmupType::linear);

  // DeepSpeed 0.19: WarmupLR's warmup_max_lr defaults to the group's lr.
  EXPECT_FALSE(dynamic_cast<WarmupLR&>(*makeScheduler({"WarmupLR", {}}, *opt, 100)).options().warmup_max_lr);
  auto decay = makeScheduler({"WarmupDecayLR", {{"total_num_steps", std::string("auto")}}}, *opt, 123);
  auto* d = dynamic_cast<WarmupDecayLR*>(decay.get());
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->options().total_num_steps, 123);  // "auto": the run's total
  EXPECT_EQ(d->options().warmup_max_lr, 0.001);
  EXPECT_EQ(d->options().warmup_type, WarmupType::log);
  EXPECT_EQ(d->options().warmup_num_steps, 1000);
  decay = makeScheduler({"WarmupDecayLR", {{"total_num_steps", int64_t{50}}}}, *opt, 123);
  EXPECT_EQ(dynamic_cast<WarmupDecayLR&>(*decay).options().total_num_steps, 50);

  auto lrAfter = [&](const SchedulerSpec& spec, int steps) {
    auto o = makeOptimizer({"SGD", {{"lr", 0.1}}}, someParams());
    auto s = makeScheduler(spec, *o, 100);
    for (int i = 0; i < steps; ++i) s->step();
    return o->paramGroups()[0].lr();
  };
  EXPECT_DOUBLE_EQ(lrAfter({"StepLR", {{"step_size", int64_t{2}}, {"gamma", 0.5}}}, 3), 0.05);
  EXPECT_DOUBLE_EQ(lrAfter({"StepLR", {{"step_size", int64_t{2}}, {"gamma", 0.5}}}, 4), 0.025);
  EXPECT_DOUBLE_EQ(lrAfter({"MultiStepLR", {{"milestones", std::vector<double>{3, 1}}, {"gamma", 0.1}}}, 2),
                   0.01);
  EXPECT_DOUBLE_EQ(lrAfter({"CosineAnnealingLR", {{"T_max", int64_t{4}}, {"eta_min", 0.02}}}, 4), 0.02);
  EXPECT_DOUBLE_EQ(lrAfter({"CosineAnnealingLR", {{"T_max", int64_t{4}}}}, 2), 0.05);
  // WarmupLR warms up to the optimizer's lr when warmup_max_lr is not given (DeepSpeed 0.19).
  EXPECT_DOUBLE_EQ(
      lrAfter({"WarmupLR", {{"warmup_num_steps", int64_t{4}}, {"warmup_type", std::string("linear")}}}, 5),
      0.1);
  // The first optimizer step runs at warmup_min_lr: the constructor applies it.
  EXPECT_DOUBLE_EQ(lrAfter({"WarmupLR", {{"warmup_min_lr", 0.02}, {"warmup_max_lr", 0.5}}}, 0), 0.02);
}

TEST(Registry, errors_name_the_key_and_suggest_the_nearest) {
  std::string e = optimizerError({"Adam", {{"lrr", 0.1}}});
  EXPECT_TRUE(has(e, "unknown key optimizer.params.lrr (did you mean optimizer.params.lr?)")) << e;
  e = optimizerError({"Adam", {{"momentum", 0.9}}});  // an SGD key
  EXPECT_TRUE(has(e, "unknown key optimizer.params.momentum") && has(e, "Adam takes lr, betas")) << e;
  e = optimizerError({"SGD", {{"betas", std::vector<double>{0.9, 0.99}}}});
  EXPECT_TRUE(has(e, "unknown key optimizer.params.betas") && has(e, "SGD takes")) << e;
  e = optimizerError({"Adam", {{"max_grad_norm", 1.0}}});
  EXPECT_TRUE(has(e, "optimizer.params.max_grad_norm") && has(e, "gradient_clipping")) << e;
  // DeepSpeed's FusedAdam bias_correction: true (its default) or false, as a hyper-parameter.
  EXPECT_EQ(optimizerError({"AdamW", {{"bias_correction", true}}}), "(no error)");
  EXPECT_EQ(optimizerError({"Adam", {{"bias_correction", false}}}), "(no error)");
  e = optimizerError({"Adam", {{"bias_correction", false}, {"torch_adam", true}}});
  EXPECT_TRUE(has(e, "optimizer.params.bias_correction: false needs DeepSpeed's FusedAdam")) << e;
  // DeepSpeedCPUAdam's fp32_optimizer_states: the states of f32 master weights are f32 either way.
  EXPECT_EQ(optimizerError({"AdamW", {{"fp32_optimizer_states", false}}}), "(no error)");
  EXPECT_EQ(optimizerError({"Adam", {{"fp32_optimizer_states", true}}}), "(no error)");
  e = optimizerError({"Adam", {{"fp32_optimizer_states", 1.5}}});
  EXPECT_TRUE(has(e, "optimizer.params.fp32_optimizer_states")) << e;
  e = optimizerError({"Adam", {{"bias_correction", std::string("no")}}});
  EXPECT_TRUE(has(e, "optimizer.params.bias_correction")) << e;
  e = optimizerError({"Lamb", {}});
  EXPECT_TRUE(has(e, "optimizer.type: Lamb is not supported yet") && has(e, "Adam, AdamW, SGD")) << e;
  e = optimizerError({"", {}});
  EXPECT_TRUE(has(e, "optimizer.type: (empty)")) << e;

  // Wrong value types.
  e = optimizerError({"Adam", {{"lr", std::string("0.1")}}});
  EXPECT_TRUE(has(e, "optimizer.params.lr: expected a number, got '0.1'")) << e;
  e = optimizerError({"Adam", {{"lr", true}}});
  EXPECT_TRUE(has(e, "optimizer.params.lr: expected a number, got true")) << e;
  e = optimizerError({"Adam", {{"betas", 0.9}}});
  EXPECT_TRUE(has(e, "optimizer.params.betas: expected a list of 2 numbers, got 0.9")) << e;
  e = optimizerError({"Adam", {{"betas", std::vector<double>{0.9, 0.99, 0.999}}}});
  EXPECT_TRUE(has(e, "optimizer.params.betas: expected a list of 2 numbers, got 3")) << e;
  e = optimizerError({"SGD", {{"nesterov", int64_t{1}}}});
  EXPECT_TRUE(has(e, "optimizer.params.nesterov: expected a boolean, got 1")) << e;
  e = optimizerError({"Adam", {{"adam_w_mode", std::string("yes")}}});
  EXPECT_TRUE(has(e, "optimizer.params.adam_w_mode: expected a boolean")) << e;

  // Invalid values.
  e = optimizerError({"SGD", {{"lr", -0.1}}});
  EXPECT_TRUE(has(e, "optimizer.params.lr: must be >= 0, got -0.1")) << e;
  e = optimizerError({"Adam", {{"betas", std::vector<double>{0.9, 1.0}}}});
  EXPECT_TRUE(has(e, "optimizer.params.betas[1]: must be in [0, 1), got 1")) << e;
  e = optimizerError({"Adam", {{"eps", -1e-8}}});
  EXPECT_TRUE(has(e, "optimizer.params.eps")) << e;
  e = optimizerError({"AdamW", {{"weight_decay", -0.1}}});
  EXPECT_TRUE(has(e, "optimizer.params.weight_decay: must be >= 0")) << e;
  e = optimizerError({"SGD", {{"nesterov", true}}});
  EXPECT_TRUE(has(e, "optimizer.params.nesterov: needs a positive momentum and zero dampening")) << e;
  e = optimizerError({"SGD", {{"nesterov", true}, {"momentum", 0.9}, {"dampening", 0.1}}});
  EXPECT_TRUE(has(e, "optimizer.params.nesterov")) << e;
  e = optimizerError({"AdamW", {{"adam_w_mode", false}}});
  EXPECT_TRUE(has(e, "optimizer.params.adam_w_mode: false has no effect with type AdamW")) << e;

  // Schedulers.
  e = schedulerError({"WarmupLR", {{"total_num_steps", int64_t{10}}}});  // a WarmupDecayLR key
  EXPECT_TRUE(has(e, "unknown key scheduler.params.total_num_steps") && has(e, "WarmupLR takes")) << e;
  e = schedulerError({"WarmupDecayLR", {{"warmup_num_step", int64_t{10}}}});
  EXPECT_TRUE(has(e, "did you mean scheduler.params.warmup_num_steps?")) << e;
  e = schedulerError({"WarmupLR", {{"warmup_type", std::string("cubic")}}});
  EXPECT_TRUE(has(e, "scheduler.params.warmup_type: expected log or linear, got 'cubic'")) << e;
  e = schedulerError({"WarmupLR", {{"warmup_num_steps", 10.5}}});
  EXPECT_TRUE(has(e, "scheduler.params.warmup_num_steps: expected an integer, got 10.5")) << e;
  e = schedulerError({"WarmupDecayLR", {{"total_num_steps", int64_t{-1}}}});
  EXPECT_TRUE(has(e, "scheduler.params.total_num_steps: must be >= 0")) << e;
  // DeepSpeed's WarmupDecayLR takes total_num_steps as a positional argument, torch's StepLR
  // step_size and CosineAnnealingLR T_max; DeepSpeed refuses warmup_num_steps <= 0.
  e = schedulerError({"WarmupDecayLR", {}});
  EXPECT_TRUE(has(e, "scheduler.params.total_num_steps: required") && has(e, "auto")) << e;
  e = schedulerError({"WarmupDecayLR", {{"total_num_steps", std::string("all")}}});
  EXPECT_TRUE(has(e, "scheduler.params.total_num_steps")) << e;
  e = schedulerError({"WarmupLR", {{"warmup_num_steps", int64_t{-5}}}});
  EXPECT_TRUE(has(e, "scheduler.params.warmup_num_steps: must be >= 0")) << e;
  e = schedulerError({"StepLR", {}});
  EXPECT_TRUE(has(e, "scheduler.params.step_size: required")) << e;
  e = schedulerError({"StepLR", {{"step_size", int64_t{0}}}});
  EXPECT_TRUE(has(e, "scheduler.params.step_size: must be positive, got 0")) << e;
  e = schedulerError({"CosineAnnealingLR", {}});
  EXPECT_TRUE(has(e, "scheduler.params.T_max: required")) << e;
  e = schedulerError({"CosineAnnealingLR", {{"t_max", int64_t{4}}}});
  EXPECT_TRUE(has(e, "unknown key scheduler.params.t_max") && has(e, "did you mean scheduler.params.T_max?"))
      << e;
  e = schedulerError({"CosineAnnealingLR", {{"T_max", int64_t{0}}}});
  EXPECT_TRUE(has(e, "scheduler.params.T_max: must be positive")) << e;
  e = schedulerError({"MultiStepLR", {}});
  EXPECT_TRUE(has(e, "scheduler.params.milestones: required")) << e;
  e = schedulerError({"MultiStepLR", {{"milestones", std::vector<double>{2, 3.5}}}});
  EXPECT_TRUE(has(e, "scheduler.params.milestones[1]: expected an integer, got 3.5")) << e;
  e = schedulerError({"OneCycle", {}});
  EXPECT_TRUE(has(e, "scheduler.type: OneCycle is not supported yet") && has(e, "WarmupLR")) << e;
  e = schedulerError({"", {{"step_size", int64_t{2}}}});
  EXPECT_TRUE(has(e, "scheduler.type: missing")) << e;
}
