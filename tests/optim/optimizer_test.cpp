// Optimizer updates against torch 1.13 on a fixed tiny problem (see torch_reference.py): two
// parameters, loss sum(w * (p - t)^2) so grad = 2 * w * (p - t), five steps.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "common/check.h"
#include "lockstep/kernels/finite.h"
#include "lockstep/optim.h"

using namespace lockstep;
using namespace lockstep::optim;
using autograd::Variable;

namespace {

const std::vector<double> kP0 = {0.5, -1.0, 2.0, 0.25}, kP1 = {0.1, -0.3, 0.7};
const std::vector<double> kT0 = {1.0, 0.0, -1.0, 0.5}, kT1 = {0.2, 0.2, -0.4};
const std::vector<double> kW0 = {1.0, 2.0, 0.5, 3.0}, kW1 = {1.5, 0.25, 1.0};

// Parameter values after 5 steps, float64, computed with torch 1.13 (tests/optim/torch_reference.py).
const std::map<std::string, std::vector<double>> kTorchF64 = {
    {"sgd_plain",
     {0.83616, -0.07776, 0.77147, 0.49744, 0.18319300000000002, -0.18689046874999996, -0.03955200000000006}},
    {"sgd_momentum",
     {0.9854617397469798, 0.5355442207850463, 0.34750691869739064, 0.6912170196062346, 0.2295337118291916,
      -0.15360898849853574, -0.3767980498709394}},
    {"sgd_nesterov",
     {1.0483369935482127, 0.41604338755122544, -0.061506844163995725, 0.5856442053200825, 0.23221760022781932,
      -0.10827726472155101, -0.5162610500109603}},
    {"adam",
     {0.9721855486293904, -0.5079636579329025, 1.50177945708264, 0.6276039356655667, 0.21085207747071666,
      0.17218553314898627, 0.20686370655230268}},
    {"adam_wd_amsgrad",
     {0.7424637065988938, -0.7526632591909852, 1.7508030535687618, 0.47915976748788436, 0.23609378754535415,
      -0.05720532604296743, 0.4524269854967751}},
    {"adamw",
     {0.9690609071270806, -0.5040800887583171, 1.4928376845688882, 0.6263401663783794, 0.2104530769261787,
      0.17259029599910444, 0.20442714184108962}},
    {"adamw_amsgrad",
     {0.731510087736634, -0.7293938161263941, 1.7034715759249834, 0.47831999061370994, 0.2563090614569281,
      -0.04918522711703379, 0.4365719473828003}},
};
// torch 1.13, same problem: sgd_momentum with p1 in a second group at half the lr (f64).
const std::vector<double> kTorchSgdTwoGroups = {0.9854617397469798, 0.5355442207850463,  0.34750691869739064,
                                                0.6912170196062346, 0.17732875546955537, -0.22471634707018312,
                                                0.09584313903336529};
// torch 1.13, float32.
const std::vector<double> kTorchAdamF32 = {0.972185492515564,  -0.5079637169837952, 1.5017794370651245,
                                           0.6276039481163025, 0.21085208654403687, 0.1721855103969574,
                                           0.20686370134353638};
const std::vector<double> kTorchAdamWAmsgradF32 = {
    0.7315100431442261,  -0.7293938994407654,  1.7034716606140137, 0.47832003235816956,
    0.25630906224250793, -0.04918523132801056, 0.4365719258785248};
// DeepSpeedCPUAdam with bias_correction=False, same problem, float32 (deepspeed_adam_reference.py):
// L2 decay (adamw_mode=False; lr 0.05, betas 0.8/0.99, eps 1e-6, weight_decay 0.1) and AdamW (lr
// 0.05, weight_decay 0.1).
const std::vector<double> kDeepSpeedAdamL2NoCorrectionF32 = {
    1.066847801208496,   -0.35681208968162537, 1.3368350267410278, 0.6213306188583374,
    0.14665085077285767, 0.27265363931655884,  0.05391893535852432};
const std::vector<double> kDeepSpeedAdamWNoCorrectionF32 = {
    1.327405333518982,   0.10822153091430664, 0.7941579818725586,  0.5967980027198792,
    0.11946627497673035, 0.5343152284622192,  -0.41695061326026917};

// torch 2.15's fused AdamW / Adam on bf16 parameters (f32 arithmetic, bf16 states), the gradients
// cast to bf16 (torch_reference.py's bf16 lines): adamw_amsgrad and adam.
const std::vector<double> kTorchFusedAdamWAmsgradBF16 = {0.73046875,  -0.7265625,    1.6953125,  0.48046875,
                                                         0.255859375, -0.0498046875, 0.431640625};
const std::vector<double> kTorchFusedAdamBF16 = {0.97265625,   -0.50390625, 1.4921875,   0.62890625,
                                                 0.2099609375, 0.171875,    0.2041015625};

// Every state tensor but the step counts is of `dtype`.
void expectStatesOf(const OptimizerStateDict& sd, DType dtype) {
  for (const auto& [key, t] : sd.state) {
    if (key.find("step") == std::string::npos) {
      EXPECT_EQ(t.dtype(), dtype) << key;
    }
  }
}

struct Problem {
  Variable p0, p1;
  explicit Problem(DType dt = DType::f64)
      : p0(Tensor::fromVector<double>(kP0, {2, 2}).to(dt), true),
        p1(Tensor::fromVector<double>(kP1, {3}).to(dt), true) {}
  std::vector<Variable> params() const { return {p0, p1}; }
  // grad = 2 w (p - t), computed in double and cast to the parameter's dtype.
  void setGrads() {
    auto one = [](Variable& p, const std::vector<double>& t, const std::vector<double>& w) {
      auto v = p.tensor().toVector<double>();
      for (size_t i = 0; i < v.size(); ++i) v[i] = 2 * w[i] * (v[i] - t[i]);
      p.setGrad(Tensor::fromVector<double>(v, p.shape()).to(p.dtype()));
    };
    one(p0, kT0, kW0);
    one(p1, kT1, kW1);
  }
  std::vector<double> values() const {
    auto a = p0.tensor().toVector<double>(), b = p1.tensor().toVector<double>();
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
};

using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<Variable>)>;

std::map<std::string, Factory> factories() {
  std::map<std::string, Factory> f;
  f["sgd_plain"] = [](auto ps) { return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1}); };
  f["sgd_momentum"] = [](auto ps) {
    return std::make_unique<SGD>(
        ps, SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  };
  f["sgd_nesterov"] = [](auto ps) {
    return std::make_unique<SGD>(
        ps, SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  };
  f["adam"] = [](auto ps) { return std::make_unique<Adam>(ps, AdamOptions{.lr = 0.1}); };
  f["adam_wd_amsgrad"] = [](auto ps) {
    return std::make_unique<Adam>(
        ps, AdamOptions{
                .lr = 0.05, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true});
  };
  f["adamw"] = [](auto ps) {
    AdamWOptions o;
    o.lr = 0.1;
    return std::make_unique<AdamW>(ps, o);
  };
  f["adamw_amsgrad"] = [](auto ps) {
    AdamWOptions o;
    o.lr = 0.05;
    o.weight_decay = 0.1;
    o.amsgrad = true;
    return std::make_unique<AdamW>(ps, o);
  };
  return f;
}

void runSteps(Problem& pr, Optimizer& opt, int n) {
  for (int i = 0; i < n; ++i) {
    pr.setGrads();
    opt.step();
  }
}

::testing::AssertionResult near(const std::vector<double>& got, const std::vector<double>& want,
                                double rtol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= rtol * (std::abs(want[i]) + 1e-3))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs torch " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

TEST(Optim, every_optimizer_matches_torch_in_float64) {
  for (auto& [name, make] : factories()) {
    Problem pr;
    auto opt = make(pr.params());
    runSteps(pr, *opt, 5);
    EXPECT_TRUE(near(pr.values(), kTorchF64.at(name), 1e-12)) << name;
  }
}

TEST(Optim, adam_and_adamw_match_torch_in_float32) {
  auto f = factories();
  Problem a(DType::f32), b(DType::f32);
  auto oa = f["adam"](a.params());
  auto ob = f["adamw_amsgrad"](b.params());
  runSteps(a, *oa, 5);
  runSteps(b, *ob, 5);
  EXPECT_EQ(a.p0.dtype(), DType::f32);
  EXPECT_TRUE(near(a.values(), kTorchAdamF32, 2e-6));
  EXPECT_TRUE(near(b.values(), kTorchAdamWAmsgradF32, 2e-6));
}

// DeepSpeed's FusedAdam / DeepSpeedCPUAdam with bias_correction=False: p -= lr m / (sqrt(v) + eps).
TEST(Optim, adam_without_bias_correction_is_deepspeeds) {
  AdamOptions l2{.lr = 0.05, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1};
  l2.bias_correction = false;
  AdamWOptions w;
  w.lr = 0.05;
  w.weight_decay = 0.1;
  w.bias_correction = false;
  // float64 against the update written out here, five steps.
  for (bool decoupled : {false, true}) {
    const AdamOptions& o = decoupled ? static_cast<const AdamOptions&>(w) : l2;
    Problem pr;
    std::unique_ptr<Optimizer> opt;
    if (decoupled) {
      opt = std::make_unique<AdamW>(pr.params(), w);
    } else {
      opt = std::make_unique<Adam>(pr.params(), l2);
    }
    std::vector<double> p = pr.values(), m(p.size(), 0.0), v(p.size(), 0.0);
    const std::vector<double> t = {1.0, 0.0, -1.0, 0.5, 0.2, 0.2, -0.4},
                              wt = {1.0, 2.0, 0.5, 3.0, 1.5, 0.25, 1.0};
    for (int step = 0; step < 5; ++step) {
      for (size_t i = 0; i < p.size(); ++i) {
        double g = 2 * wt[i] * (p[i] - t[i]);
        if (!decoupled) g += o.weight_decay * p[i];
        m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
        v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
        if (decoupled) p[i] *= 1 - o.lr * o.weight_decay;
        p[i] -= o.lr * m[i] / (std::sqrt(v[i]) + o.eps);
      }
    }
    runSteps(pr, *opt, 5);
    EXPECT_TRUE(near(pr.values(), p, 1e-12)) << "decoupled " << decoupled;
    // With the correction the same options end elsewhere: the flag is not ignored.
    EXPECT_FALSE(near(pr.values(), kTorchF64.at(decoupled ? "adamw_amsgrad" : "adam_wd_amsgrad"), 1e-3));
  }
  // float32 against DeepSpeed itself. Its rounding is further from the exact update than lockstep's
  // (AdamW, element 1: DeepSpeed 0.1082215, lockstep 0.1082154, float64 0.1082156), hence the
  // bound; without the correction the values are far from the corrected ones (1.07 vs 0.74).
  Problem a(DType::f32), b(DType::f32);
  Adam oa(a.params(), l2);
  AdamW ob(b.params(), w);
  runSteps(a, oa, 5);
  runSteps(b, ob, 5);
  EXPECT_TRUE(near(a.values(), kDeepSpeedAdamL2NoCorrectionF32, 1e-4));
  EXPECT_TRUE(near(b.values(), kDeepSpeedAdamWNoCorrectionF32, 1e-4));
  // The flag is a hyper-parameter: saved and restored with the state; a state saved before the
  // key existed loads as corrected (what those runs did).
  auto sd = ob.stateDict();
  EXPECT_FALSE(std::get<bool>(sd.param_groups[0].options.at("bias_correction")));
  sd.param_groups[0].options.erase("bias_correction");
  EXPECT_TRUE(AdamW::fromHyper(sd.param_groups[0].options).bias_correction);
}

// bf16 parameters step in f32 arithmetic and keep bf16 states, as torch's fused optimizers do (and
// DeepSpeed's bf16 master weights, which step them with FusedAdam's f32 arithmetic).
TEST(Optim, bf16_parameters_step_as_torchs_fused_adam) {
  auto f = factories();
  Problem a(DType::bf16), b(DType::bf16);
  auto oa = f["adamw_amsgrad"](a.params());
  auto ob = f["adam"](b.params());
  runSteps(a, *oa, 5);
  runSteps(b, *ob, 5);
  EXPECT_EQ(a.p0.dtype(), DType::bf16);
  expectStatesOf(oa->stateDict(), DType::bf16);
  EXPECT_TRUE(near(a.values(), kTorchFusedAdamWAmsgradBF16, 0.0));
  EXPECT_TRUE(near(b.values(), kTorchFusedAdamBF16, 0.0));
}

// DeepSpeedCPUAdam's fp32_optimizer_states: f32 states beside bf16 parameters, kept through a state
// dict round trip (a checkpoint) and continuing as the run that kept them.
TEST(Optim, fp32_states_of_bf16_parameters_stay_f32_through_a_state_dict) {
  AdamWOptions o;
  o.lr = 0.05;
  o.fp32_states = true;
  Problem a(DType::bf16), b(DType::bf16), plain(DType::bf16);
  AdamW oa(a.params(), o);
  runSteps(a, oa, 3);
  expectStatesOf(oa.stateDict(), DType::f32);
  AdamW ob(b.params(), o);
  b.p0.tensor().copyFrom(a.p0.tensor());
  b.p1.tensor().copyFrom(a.p1.tensor());
  ob.loadStateDict(oa.stateDict());
  expectStatesOf(ob.stateDict(), DType::f32);
  runSteps(a, oa, 2);
  runSteps(b, ob, 2);
  EXPECT_EQ(b.values(), a.values());
  // The option is saved with the hyper-parameters and changes what bf16 states would give.
  EXPECT_TRUE(AdamW::fromHyper(oa.stateDict().param_groups[0].options).fp32_states);
  o.fp32_states = false;
  AdamW op(plain.params(), o);
  runSteps(plain, op, 5);
  EXPECT_NE(plain.values(), a.values());
}

TEST(Optim, param_groups_have_their_own_lr) {
  Problem pr;
  SGD opt({pr.p0}, SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  opt.addParamGroup({pr.p1}, {{"lr", 0.025}});
  ASSERT_EQ(opt.paramGroups().size(), 2u);
  EXPECT_DOUBLE_EQ(opt.paramGroups()[1].lr(), 0.025);
  EXPECT_DOUBLE_EQ(hyperDouble(opt.paramGroups()[1].options, "momentum"), 0.9);
  runSteps(pr, opt, 5);
  EXPECT_TRUE(near(pr.values(), kTorchSgdTwoGroups, 1e-12));
}

TEST(Optim, bad_groups_and_options_are_rejected) {
  Problem pr;
  SGD opt({pr.p0}, SGDOptions{});
  EXPECT_THROW(opt.addParamGroup({pr.p0}), ValueError);                    // already in a group
  EXPECT_THROW(opt.addParamGroup({pr.p1}, {{"betas", 0.5}}), ValueError);  // unknown hyper-parameter
  EXPECT_THROW(SGD({pr.p1}, SGDOptions{.lr = -1.0}), ValueError);
  EXPECT_THROW(SGD({pr.p1}, SGDOptions{.nesterov = true}), ValueError);  // nesterov without momentum
  EXPECT_THROW(Adam({pr.p1}, AdamOptions{.beta2 = 1.0}), ValueError);
}

TEST(Optim, parameters_without_gradients_are_skipped) {
  Problem pr;
  Adam opt(pr.params(), AdamOptions{.lr = 0.1});
  pr.setGrads();
  pr.p1.zeroGrad(true);
  opt.step();
  EXPECT_EQ(pr.p1.tensor().toVector<double>(), kP1);
  EXPECT_NE(pr.p0.tensor().toVector<double>(), kP0);
  auto sd = opt.stateDict();
  EXPECT_TRUE(sd.state.contains("0.exp_avg"));
  EXPECT_FALSE(sd.state.contains("1.exp_avg"));
  EXPECT_EQ(sd.state.at("0.step").item<int64_t>(), 1);
}

TEST(Optim, zero_grad_clears_or_zero_fills) {
  Problem pr;
  SGD opt(pr.params(), SGDOptions{});
  pr.setGrads();
  Tensor view = pr.p0.grad();
  opt.zeroGrad(false);
  EXPECT_TRUE(pr.p0.hasGrad());
  EXPECT_TRUE(pr.p0.grad().sharesStorage(view));
  EXPECT_EQ(pr.p0.grad().toVector<double>(), std::vector<double>(4, 0.0));
  opt.zeroGrad();
  EXPECT_FALSE(pr.p0.hasGrad());
}

// Three steps, save, load into a fresh optimizer over copies of the parameters, then two more
// steps on both: the trajectories must be identical (bit for bit) and end at torch's 5-step values.
TEST(Optim, state_dict_round_trip_continues_identically) {
  for (auto& [name, make] : factories()) {
    Problem a;
    auto oa = make(a.params());
    runSteps(a, *oa, 3);
    OptimizerStateDict sd = oa->stateDict();
    Problem b;
    b.p0.tensor().copyFrom(a.p0.tensor());
    b.p1.tensor().copyFrom(a.p1.tensor());
    auto ob = make(b.params());
    ob->paramGroups()[0].setLr(123.0);  // overwritten by the load
    ob->loadStateDict(sd);
    EXPECT_DOUBLE_EQ(ob->paramGroups()[0].lr(), oa->paramGroups()[0].lr()) << name;
    runSteps(a, *oa, 2);
    runSteps(b, *ob, 2);
    EXPECT_EQ(a.values(), b.values()) << name;
    EXPECT_TRUE(near(b.values(), kTorchF64.at(name), 1e-12)) << name;
  }
}

TEST(Optim, state_dict_names_every_buffer) {
  Problem pr;
  Adam opt(pr.params(), AdamOptions{.amsgrad = true});
  runSteps(pr, opt, 2);
  auto sd = opt.stateDict();
  EXPECT_EQ(sd.state.keys(),
            (std::vector<std::string>{"0.step", "0.exp_avg", "0.exp_avg_sq", "0.max_exp_avg_sq", "1.step",
                                      "1.exp_avg", "1.exp_avg_sq", "1.max_exp_avg_sq"}));
  ASSERT_EQ(sd.param_groups.size(), 1u);
  EXPECT_EQ(sd.param_groups[0].params, (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(std::get<bool>(sd.param_groups[0].options.at("amsgrad")));
  SGD sgd(pr.params(), SGDOptions{.momentum = 0.9});
  runSteps(pr, sgd, 1);
  EXPECT_EQ(sgd.stateDict().state.keys(),
            (std::vector<std::string>{"0.momentum_buffer", "1.momentum_buffer"}));
}

TEST(Optim, load_state_dict_rejects_mismatches) {
  Problem pr;
  Adam opt(pr.params());
  runSteps(pr, opt, 1);
  auto sd = opt.stateDict();
  Problem other;
  Adam one_param({other.p0});
  EXPECT_THROW(one_param.loadStateDict(sd), ValueError);  // group sizes differ
  OptimizerStateDict bad = sd;
  bad.state = StateDict();
  bad.state.insert("7.exp_avg", Tensor::zeros({2, 2}, DType::f64));
  Adam fresh(other.params());
  EXPECT_THROW(fresh.loadStateDict(bad), ValueError);  // no parameter 7
  bad.state = StateDict();
  bad.state.insert("1.exp_avg", Tensor::zeros({2, 2}, DType::f64));
  EXPECT_THROW(fresh.loadStateDict(bad), ValueError);  // shape differs from p1's
}

// A stepped parameter's state must be whole: a missing moment would step on from zeros (a wrong
// update, silently), an unknown buffer would be dropped. A parameter with no state at all is one
// that never had a gradient, as in torch.
TEST(Optim, load_state_dict_refuses_a_parameter_state_missing_or_adding_a_buffer) {
  Problem pr;
  Adam opt(pr.params());
  runSteps(pr, opt, 1);
  const OptimizerStateDict sd = opt.stateDict();
  auto without = [&](const std::string& drop) {
    OptimizerStateDict out = sd;
    out.state = StateDict();
    for (const auto& [k, t] : sd.state)
      if (k != drop) out.state.insert(k, t);
    return out;
  };
  auto message = [](Optimizer& o, const OptimizerStateDict& state) -> std::string {
    try {
      o.loadStateDict(state);
    } catch (const ValueError& e) {
      return e.what();
    }
    return "";
  };
  Problem other;
  Adam fresh(other.params());
  EXPECT_NE(message(fresh, without("1.exp_avg_sq")).find("parameter 1 has no 'exp_avg_sq'"),
            std::string::npos);
  EXPECT_NE(message(fresh, without("0.step")).find("parameter 0 has no 'step'"), std::string::npos);
  OptimizerStateDict extra = sd;
  extra.state.insert("0.momentum_buffer", Tensor::zeros({2, 2}, DType::f64));
  EXPECT_NE(message(fresh, extra).find("holds 'momentum_buffer'"), std::string::npos);
  for (const double step : {-4.0, 0.0, 2.5}) {  // a step count is a whole number >= 1
    OptimizerStateDict bad_step = sd;
    bad_step.state = StateDict();
    for (const auto& [k, t] : sd.state)
      bad_step.state.insert(k, k == "0.step" ? Tensor::scalar(step, DType::f64) : t);
    EXPECT_NE(message(fresh, bad_step).find("state key '0.step' is not a step count"), std::string::npos)
        << step;
  }
  // A refused load changes nothing: the fresh optimizer still has no state.
  EXPECT_TRUE(fresh.stateDict().state.keys().empty());
  // amsgrad's third buffer is wanted when the loaded options ask for it.
  OptimizerStateDict ams = sd;
  ams.param_groups[0].options["amsgrad"] = true;
  EXPECT_NE(message(fresh, ams).find("no 'max_exp_avg_sq'"), std::string::npos);
  // Parameter 1 never stepped (no state at all): loads, as torch's would.
  OptimizerStateDict partial = without("1.exp_avg_sq");
  partial.state = StateDict();
  for (const auto& [k, t] : sd.state)
    if (k.rfind("1.", 0) != 0) partial.state.insert(k, t);
  EXPECT_EQ(message(fresh, partial), "");
  // Another optimizer's state: its hyper-parameters name it.
  SGD sgd(other.params(), SGDOptions{.momentum = 0.9});
  EXPECT_NE(message(sgd, sd).find("which SGD does not have: the state is another optimizer's"),
            std::string::npos);
  // A hyper-parameter the state lacks (added since it was written) keeps the group's value.
  OptimizerStateDict older = sd;
  older.param_groups[0].options.erase("amsgrad");
  EXPECT_EQ(message(fresh, older), "");
  EXPECT_FALSE(hyperBool(fresh.paramGroups()[0].options, "amsgrad"));
}

// torch.nn.utils.clip_grad_norm_(max_norm=1) on the gradients at the starting point, torch 1.13.
TEST(Optim, clip_grad_norm_matches_torch) {
  struct Case {
    double norm_type, total;
    std::vector<double> grads;
  };
  const std::vector<Case> cases = {
      {2.0,
       5.765630928181235,
       {-0.17344152600380258, -0.6937661040152103, 0.5203245780114077, -0.2601622890057039,
        -0.05203245780114078, -0.043360381500950645, 0.3815713572083657}},
      {1.0,
       12.25,
       {-0.08163264639733499, -0.32653058558933995, 0.24489793919200498, -0.12244896959600249,
        -0.0244897939192005, -0.020408161599333747, 0.179591822074137}},
      {INFINITY,
       4.0,
       {-0.24999993750001562, -0.9999997500000625, 0.7499998125000469, -0.37499990625002344,
        -0.07499998125000469, -0.062499984375003904, 0.5499998625000344}},
  };
  for (const auto& c : cases) {
    Problem pr;
    pr.setGrads();
    double total = clipGradNorm(pr.params(), 1.0, ClipGradNormOptions{.norm_type = c.norm_type});
    EXPECT_NEAR(total, c.total, 1e-12) << c.norm_type;
    auto g = pr.p0.grad().toVector<double>(), g1 = pr.p1.grad().toVector<double>();
    g.insert(g.end(), g1.begin(), g1.end());
    EXPECT_TRUE(near(g, c.grads, 1e-12)) << c.norm_type;
  }
  Problem pr;
  pr.setGrads();
  auto before = pr.p0.grad().toVector<double>();
  EXPECT_NEAR(clipGradNorm(pr.params(), 100.0), 5.765630928181235, 1e-12);
  EXPECT_EQ(pr.p0.grad().toVector<double>(), before);  // under the limit: untouched
  pr.p0.setGrad(Tensor::full({2, 2}, NAN, DType::f64));
  EXPECT_THROW(clipGradNorm(pr.params(), 1.0, ClipGradNormOptions{.error_if_nonfinite = true}), ValueError);
}

// A channels_last parameter with a contiguous gradient (and the reverse) updates element by element
// exactly like the contiguous case.
TEST(Optim, layouts_of_parameter_and_gradient_may_differ) {
  Tensor base = lockstep::testing::randomTensor({2, 3, 2, 2}, DType::f32, 5);
  Tensor grad = lockstep::testing::randomTensor({2, 3, 2, 2}, DType::f32, 6);
  Variable plain(base.clone(), true), cl(base.toFormat(MemoryFormat::channels_last), true);
  ASSERT_TRUE(cl.tensor().isChannelsLast());
  plain.setGrad(grad.clone());
  cl.setGrad(grad.clone());  // contiguous gradient for a channels_last parameter
  Adam a({plain}, AdamOptions{.lr = 0.1}), b({cl}, AdamOptions{.lr = 0.1});
  for (int i = 0; i < 3; ++i) {
    a.step();
    b.step();
  }
  EXPECT_TRUE(cl.tensor().isChannelsLast());
  EXPECT_EQ(plain.tensor().toVector<float>(), cl.tensor().toVector<float>());
  EXPECT_EQ(a.stateDict().state.at("0.exp_avg").toVector<float>(),
            b.stateDict().state.at("0.exp_avg").toVector<float>());
  // The loaded state takes the parameter's layout whatever the saved layout was.
  Adam c({cl}, AdamOptions{.lr = 0.1});
  c.loadStateDict(a.stateDict());
  EXPECT_TRUE(c.stateDict().state.at("0.exp_avg").isChannelsLast());
}

// ZeRO's host step fused into the update (Optimizer::stepFused): the gradients multiplied by
// grad_scale as read and the updated parameters rounded into 16-bit copies in the same pass give
// bitwise what the separate passes give (gradients scaled first as kernels::scaleAndCheckNonFinite
// scales them, the parameters converted after), for every option combination, over several steps
// (odd sizes: the blocks' tails), and the gradients themselves are left as they were.
TEST(Optim, fused_step_is_bitwise_the_separate_passes) {
  for (bool decoupled : {false, true}) {
    for (bool amsgrad : {false, true}) {
      for (double wd : {0.0, 0.05}) {
        for (DType copy_dtype : {DType::bf16, DType::f16}) {
          SCOPED_TRACE(std::string(decoupled ? "AdamW" : "Adam") + (amsgrad ? " amsgrad" : "") + " wd " +
                       std::to_string(wd) + " copy " + dtypeName(copy_dtype));
          auto make = [&](const std::vector<Variable>& ps) -> std::unique_ptr<Adam> {
            AdamWOptions o;
            o.lr = 0.01;
            o.weight_decay = wd;
            o.amsgrad = amsgrad;
            if (decoupled) return std::make_unique<AdamW>(ps, o);
            return std::make_unique<Adam>(ps, static_cast<const AdamOptions&>(o));
          };
          std::vector<Variable> a, b;
          for (int64_t n : {1, 2047, 5000}) {
            a.push_back(Variable(lockstep::testing::randomTensor({n}, DType::f32, 10 + n), true));
            b.push_back(Variable(a.back().tensor().clone(), true));
          }
          auto fused = make(a), plain = make(b);
          ASSERT_TRUE(fused->stepsFused());
          for (int step = 0; step < 3; ++step) {
            const double scale = step == 1 ? 1.0 : 0.37;
            Optimizer::FusedStepExtras extras;
            extras.grad_scale = scale;
            std::vector<Tensor> copies;
            for (size_t i = 0; i < a.size(); ++i) {
              Tensor g =
                  lockstep::testing::randomTensor(a[i].shape(), DType::f32, 100 * step + static_cast<int>(i));
              a[i].setGrad(g.clone());
              Tensor gb = g.clone();
              if (scale != 1.0) kernels::scaleAndCheckNonFinite(gb, scale);
              b[i].setGrad(gb);
              copies.push_back(Tensor::empty(a[i].shape(), copy_dtype));
              if (i != 1) extras.copies.emplace(a[i].tensor().dataPtr(), copies.back());
            }
            const std::vector<float> grad_before = a[2].grad().toVector<float>();
            fused->stepFused(extras);
            plain->step();
            for (size_t i = 0; i < a.size(); ++i) {
              EXPECT_EQ(a[i].tensor().toVector<float>(), b[i].tensor().toVector<float>()) << i;
              if (i == 1) continue;  // no copy asked for
              EXPECT_EQ(copies[i].toVector<float>(), b[i].tensor().to(copy_dtype).toVector<float>()) << i;
            }
            EXPECT_EQ(a[2].grad().toVector<float>(), grad_before);
          }
        }
      }
    }
  }
  // Where it cannot fuse: f64 parameters, and SGD, say so.
  std::vector<Variable> f64{Variable(Tensor::zeros({3}, DType::f64), true)};
  Adam adam64(f64);
  EXPECT_FALSE(adam64.stepsFused());
  EXPECT_THROW(adam64.stepFused({}), NotSupportedError);
  SGD sgd({Variable(Tensor::zeros({3}), true)}, SGDOptions{});
  EXPECT_FALSE(sgd.stepsFused());
  EXPECT_THROW(sgd.stepFused({}), NotSupportedError);
}
