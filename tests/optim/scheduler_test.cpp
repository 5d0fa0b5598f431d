// LR schedules against torch 1.13's schedulers and a transcription of DeepSpeed's WarmupLR /
// WarmupDecayLR (tests/optim/torch_reference.py prints every constant below).
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/optim.h"

using namespace lockstep;
using namespace lockstep::optim;
using autograd::Variable;

namespace {

// lr after construction and after each of 11 step() calls, base lr 0.1.
// torch 1.13 StepLR(step_size=3, gamma=0.5):
const std::vector<double> kTorchStepLR = {0.1,   0.1,   0.1,   0.05,   0.05,   0.05,
                                          0.025, 0.025, 0.025, 0.0125, 0.0125, 0.0125};
// torch 1.13 MultiStepLR(milestones=[2, 5, 9], gamma=0.1):
const std::vector<double> kTorchMultiStepLR = {0.1,
                                               0.1,
                                               0.010000000000000002,
                                               0.010000000000000002,
                                               0.010000000000000002,
                                               0.0010000000000000002,
                                               0.0010000000000000002,
                                               0.0010000000000000002,
                                               0.0010000000000000002,
                                               0.00010000000000000003,
                                               0.00010000000000000003,
                                               0.00010000000000000003};
// torch 1.13 CosineAnnealingLR(T_max=10, eta_min=0.001):
const std::vector<double> kTorchCosine = {
    0.1,    0.09757729755661011,  0.0905463412215599,  0.07959536998847742,  0.0657963412215599,
    0.0505, 0.03520365877844011,  0.02140463001152259, 0.010453658778440109, 0.0034227024433899004,
    0.001,  0.0034227024433899004};

// DeepSpeed (lr after each of 12 step() calls):
// WarmupLR(min 0.001, max 0.1, steps 5, log)
const std::vector<double> kDsWarmupLog = {
    0.001, 0.04363697924926591, 0.06857801325411256, 0.08627395849853182, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1,
    0.1};
// WarmupLR(min 0, max 0.1, steps 5, linear)
const std::vector<double> kDsWarmupLinear = {
    0.0, 0.020000000000000004, 0.04000000000000001, 0.06, 0.08000000000000002, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1,
    0.1};
// WarmupDecayLR(total 10, min 0.001, max 0.1, steps 4, log)
const std::vector<double> kDsDecayLog = {
    0.001, 0.0505, 0.07945564378569724, 0.1, 0.1, 0.0835, 0.067, 0.0505, 0.034, 0.0175, 0.001, 0.001};
// WarmupDecayLR(total 10, min 0, max 0.1, steps 4, linear)
const std::vector<double> kDsDecayLinear = {0.0,
                                            0.025,
                                            0.05,
                                            0.07500000000000001,
                                            0.1,
                                            0.08333333333333334,
                                            0.06666666666666667,
                                            0.05,
                                            0.03333333333333333,
                                            0.016666666666666666,
                                            0.0,
                                            0.0};
// WarmupLR(min 0, max 0.1, steps 1 -> clamped to 2, linear)
const std::vector<double> kDsWarmupClamped = {0.0, 0.05, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1};

void expectSeq(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-15 + 1e-12 * std::abs(want[i])) << "at " << i;
}

struct Fixture {
  Variable p{Tensor::zeros({1}), true};
  SGD opt{{p}, SGDOptions{.lr = 0.1}};
};

// PyTorch-style: the value after construction, then after each step().
template <typename S, typename O>
std::vector<double> torchSequence(const O& options, int n = 12) {
  Fixture f;
  S s(f.opt, options);
  std::vector<double> out{f.opt.paramGroups()[0].lr()};
  for (int i = 1; i < n; ++i) {
    s.step();
    out.push_back(f.opt.paramGroups()[0].lr());
    EXPECT_DOUBLE_EQ(s.getLr()[0], out.back());
  }
  return out;
}

// DeepSpeed-style: the value after each step().
template <typename S, typename O>
std::vector<double> deepspeedSequence(const O& options, int n = 12) {
  Fixture f;
  S s(f.opt, options);
  // DeepSpeed 0.19's constructor applies iteration -1: warmup_min_lr (the first step runs at it).
  EXPECT_DOUBLE_EQ(f.opt.paramGroups()[0].lr(), options.warmup_min_lr);
  EXPECT_EQ(s.counter(), -1);
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    s.step();
    out.push_back(s.lastLr()[0]);
  }
  return out;
}

}  // namespace

TEST(LrSchedule, pure_functions) {
  EXPECT_DOUBLE_EQ(stepLr(1.0, 7, 3, 0.5), 0.25);
  EXPECT_DOUBLE_EQ(multiStepLr(1.0, 5, {2, 5, 9}, 0.1), 0.01 * 1.0000000000000002);
  EXPECT_DOUBLE_EQ(multiStepLr(1.0, 1, {2, 5, 9}, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(cosineAnnealingLr(1.0, 0, 10, 0.0), 1.0);
  EXPECT_NEAR(cosineAnnealingLr(1.0, 5, 10, 0.0), 0.5, 1e-15);
  EXPECT_NEAR(cosineAnnealingLr(1.0, 10, 10, 0.2), 0.2, 1e-15);
  WarmupLROptions w{.warmup_min_lr = 0.25,
                    .warmup_max_lr = 1.25,
                    .warmup_num_steps = 10,
                    .warmup_type = WarmupType::linear};
  EXPECT_DOUBLE_EQ(warmupLr(-1, w, 9.0), 0.25);  // before the start DeepSpeed 0.19 returns min_lrs
  EXPECT_DOUBLE_EQ(warmupLr(3, w, 9.0), 0.55);
  EXPECT_DOUBLE_EQ(warmupLr(10, w, 9.0), 1.25);
  w.warmup_max_lr.reset();  // DeepSpeed 0.19's default: the group's lr
  EXPECT_DOUBLE_EQ(warmupLr(10, w, 9.0), 9.0);
  w.warmup_min_lr = 0.0;
  w.warmup_max_lr = 1.0;
  w.warmup_type = WarmupType::log;
  EXPECT_NEAR(warmupLr(4, w, 9.0), std::log(5.0) / std::log(10.0), 1e-15);
  WarmupDecayLROptions d;
  EXPECT_EQ(d.warmup_max_lr, 0.001);  // WarmupDecayLR's default stays 0.001
  d.warmup_min_lr = 0.0;
  d.warmup_max_lr = 1.0;
  d.warmup_num_steps = 10;
  d.total_num_steps = 30;
  EXPECT_DOUBLE_EQ(warmupDecayLr(20, d, 9.0), 0.5);
  EXPECT_DOUBLE_EQ(warmupDecayLr(40, d, 9.0), 0.0);
  EXPECT_EQ(warmupTypeFromName("linear"), WarmupType::linear);
  EXPECT_THROW(warmupTypeFromName("cosine"), ValueError);
  EXPECT_THROW(stepLr(1.0, 1, 0, 0.1), ValueError);
}

TEST(LrScheduler, step_lr_matches_torch) {
  expectSeq(torchSequence<StepLR>(StepLROptions{3, 0.5}), kTorchStepLR);
}

TEST(LrScheduler, multi_step_lr_matches_torch) {
  expectSeq(torchSequence<MultiStepLR>(MultiStepLROptions{{9, 2, 5}, 0.1}), kTorchMultiStepLR);
}

TEST(LrScheduler, cosine_annealing_matches_torch) {
  expectSeq(torchSequence<CosineAnnealingLR>(CosineAnnealingLROptions{10, 0.001}), kTorchCosine);
}

TEST(LrScheduler, warmup_lr_matches_deepspeed) {
  expectSeq(deepspeedSequence<WarmupLR>(WarmupLROptions{0.001, 0.1, 5, WarmupType::log}), kDsWarmupLog);
  expectSeq(deepspeedSequence<WarmupLR>(WarmupLROptions{0.0, 0.1, 5, WarmupType::linear}), kDsWarmupLinear);
  expectSeq(deepspeedSequence<WarmupLR>(WarmupLROptions{0.0, 0.1, 1, WarmupType::linear}), kDsWarmupClamped);
}

TEST(LrScheduler, warmup_decay_lr_matches_deepspeed) {
  WarmupDecayLROptions o;
  o.warmup_min_lr = 0.001;
  o.warmup_max_lr = 0.1;
  o.warmup_num_steps = 4;
  o.warmup_type = WarmupType::log;
  o.total_num_steps = 10;
  expectSeq(deepspeedSequence<WarmupDecayLR>(o), kDsDecayLog);
  o.warmup_min_lr = 0.0;
  o.warmup_type = WarmupType::linear;
  expectSeq(deepspeedSequence<WarmupDecayLR>(o), kDsDecayLinear);
}

TEST(LrScheduler, schedules_every_group_from_its_own_base_lr) {
  Fixture f;
  Variable q(Tensor::zeros({1}), true);
  f.opt.addParamGroup({q}, {{"lr", 1.0}});
  StepLR s(f.opt, StepLROptions{2, 0.1});
  s.step();
  s.step();
  EXPECT_NEAR(f.opt.paramGroups()[0].lr(), 0.01, 1e-17);
  EXPECT_NEAR(f.opt.paramGroups()[1].lr(), 0.1, 1e-16);
  EXPECT_EQ(s.baseLrs(), (std::vector<double>{0.1, 1.0}));
}

TEST(LrScheduler, state_dict_round_trip_continues_identically) {
  Fixture a;
  CosineAnnealingLR sa(a.opt, CosineAnnealingLROptions{10, 0.001});
  for (int i = 0; i < 4; ++i) sa.step();
  HyperParams state = sa.stateDict();
  EXPECT_EQ(std::get<int64_t>(state.at("last_epoch")), 4);
  EXPECT_DOUBLE_EQ(std::get<double>(state.at("base_lrs.0")), 0.1);

  Fixture b;
  CosineAnnealingLR sb(b.opt, CosineAnnealingLROptions{10, 0.001});
  b.opt.loadStateDict(a.opt.stateDict());  // restores the group lr
  sb.loadStateDict(state);
  EXPECT_EQ(sb.counter(), 4);
  for (int i = 0; i < 5; ++i) {
    sa.step();
    sb.step();
    EXPECT_EQ(a.opt.paramGroups()[0].lr(), b.opt.paramGroups()[0].lr());
  }

  Fixture c;
  WarmupDecayLROptions o;
  o.total_num_steps = 100;
  o.warmup_num_steps = 10;
  WarmupDecayLR wc(c.opt, o);
  for (int i = 0; i < 7; ++i) wc.step();
  Fixture d;
  WarmupDecayLR wd(d.opt, o);
  wd.loadStateDict(wc.stateDict());
  EXPECT_EQ(std::get<int64_t>(wc.stateDict().at("last_batch_iteration")), 6);
  wc.step();
  wd.step();
  EXPECT_EQ(c.opt.paramGroups()[0].lr(), d.opt.paramGroups()[0].lr());
  EXPECT_THROW(wd.loadStateDict(HyperParams{{"last_epoch", int64_t{3}}}), ValueError);
}
