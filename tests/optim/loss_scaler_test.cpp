// The loss scaler's state machine against DeepSpeed 0.19's DynamicLossScaler.update_scale and
// FP16_Optimizer._update_scale: every expected row below was printed by DeepSpeed's own code
// (deepspeed_loss_scaler_oracle.py).
#include "lockstep/optim/loss_scaler.h"

#include <gtest/gtest.h>

#include <vector>

#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::optim;

namespace {

// The scaler's state after one update(overflow).
struct Row {
  bool overflow;
  double scale;
  int64_t hysteresis;
  int64_t last_overflow_iter;
  int64_t iteration;
};

LossScalerOptions dynamicOptions(int64_t power, int64_t window, int64_t hysteresis) {
  LossScalerOptions o;
  o.initial_scale_power = power;
  o.loss_scale_window = window;
  o.hysteresis = hysteresis;
  return o;
}

void expectRows(LossScaler& s, const std::vector<Row>& rows) {
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE("update " + std::to_string(i));
    s.update(rows[i].overflow);
    EXPECT_EQ(s.scale(), rows[i].scale);
    EXPECT_EQ(s.remainingHysteresis(), rows[i].hysteresis);
    EXPECT_EQ(s.lastOverflowIteration(), rows[i].last_overflow_iter);
    EXPECT_EQ(s.iteration(), rows[i].iteration);
  }
}

}  // namespace

TEST(LossScaler, defaults_are_deepspeeds_fp16_keys) {
  LossScalerOptions o;
  EXPECT_EQ(o.loss_scale, 0.0);
  EXPECT_EQ(o.initial_scale_power, 16);
  EXPECT_EQ(o.loss_scale_window, 1000);
  EXPECT_EQ(o.hysteresis, 2);
  EXPECT_FALSE(o.consecutive_hysteresis);
  EXPECT_EQ(o.min_loss_scale, 1.0);
  EXPECT_EQ(o.scale_factor, 2.0);
  LossScaler s(o);
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.remainingHysteresis(), 2);
  EXPECT_EQ(s.lastOverflowIteration(), -1);
  EXPECT_EQ(s.iteration(), 0);
}

TEST(LossScaler, overflow_halves_once_the_hysteresis_is_used_up) {
  // hysteresis 2: the first overflow only uses it up; later ones halve, and a clean step does not
  // refill it (consecutive_hysteresis off, and the window of 1000 is not reached).
  LossScaler s(dynamicOptions(16, 1000, 2));
  expectRows(s, {{true, 65536, 1, 0, 1},
                 {true, 32768, 1, 1, 2},
                 {true, 16384, 1, 2, 3},
                 {false, 16384, 1, 2, 4},
                 {true, 8192, 1, 4, 5},
                 {true, 4096, 1, 5, 6}});
  EXPECT_EQ(s.overflows(), 5);
}

TEST(LossScaler, window_of_clean_steps_doubles) {
  // Window 3: doubles where s = iter - last overflow - 1 is positive and a multiple of 3: at the
  // 4th clean step from the start (last overflow -1) and the 4th after an overflow (DeepSpeed
  // 0.19; before 2025 it counted one fewer).
  LossScaler s(dynamicOptions(3, 3, 1));
  expectRows(s, {{false, 8, 1, -1, 1},
                 {false, 8, 1, -1, 2},
                 {false, 8, 1, -1, 3},
                 {false, 16, 1, -1, 4},
                 {false, 16, 1, -1, 5},
                 {false, 16, 1, -1, 6},
                 {true, 8, 1, 6, 7},
                 {false, 8, 1, 6, 8},
                 {false, 8, 1, 6, 9},
                 {false, 8, 1, 6, 10},
                 {false, 16, 1, 6, 11}});
  EXPECT_EQ(s.overflows(), 1);
}

TEST(LossScaler, fp16_optimizer_divides_at_every_overflow_and_never_raises) {
  // DeepSpeed's engine without ZeRO (FP16_Optimizer._update_scale): the hysteresis plays no part
  // and an overflow at min_loss_scale keeps the minimum.
  LossScalerOptions o = dynamicOptions(3, 3, 2);
  o.min_loss_scale = 2;
  o.fp16_optimizer = true;
  LossScaler s(o);
  const std::vector<bool> overflow = {false, false, false, false, true, true, false,
                                      false, false, false, true,  true, true, true};
  const std::vector<double> scale = {8, 8, 8, 16, 8, 4, 4, 4, 4, 8, 4, 2, 2, 2};
  const std::vector<int64_t> last = {-1, -1, -1, -1, 4, 5, 5, 5, 5, 5, 10, 11, 12, 13};
  for (size_t i = 0; i < overflow.size(); ++i) {
    SCOPED_TRACE("update " + std::to_string(i));
    s.update(overflow[i]);
    EXPECT_EQ(s.scale(), scale[i]);
    EXPECT_EQ(s.lastOverflowIteration(), last[i]);
    EXPECT_EQ(s.iteration(), static_cast<int64_t>(i) + 1);
  }
}

TEST(LossScaler, min_loss_scale_is_a_floor) {
  LossScalerOptions o = dynamicOptions(3, 1000, 1);
  o.min_loss_scale = 2;
  o.raise_error_at_min_scale = false;
  LossScaler s(o);
  expectRows(s, {{true, 4, 1, 0, 1}, {true, 2, 1, 1, 2}, {true, 2, 1, 2, 3}, {true, 2, 1, 3, 4}});
  // Between scale_factor steps: max(3 / 2, 2) = 2.
  o.min_loss_scale = 1.5;
  o.initial_scale_power = 1;
  LossScaler t(o);
  t.update(true);
  EXPECT_EQ(t.scale(), 1.5);
}

TEST(LossScaler, overflow_at_the_minimum_raises_like_deepspeed) {
  LossScalerOptions o = dynamicOptions(3, 1000, 1);
  o.min_loss_scale = 2;
  LossScaler s(o);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 2.0);
  try {
    s.update(true);
    FAIL() << "expected an error at the minimum scale";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp16.min_loss_scale"), std::string::npos) << e.what();
  }
}

TEST(LossScaler, consecutive_hysteresis_refills_after_every_clean_step) {
  // The same overflow pattern with consecutive_hysteresis off and on (hysteresis 2, window 4).
  const std::vector<bool> pattern = {true, false, true, true, false, false, false, true};
  LossScalerOptions o = dynamicOptions(6, 4, 2);
  LossScaler off(o);
  o.consecutive_hysteresis = true;
  LossScaler on(o);
  std::vector<Row> want_off = {{true, 64, 1, 0, 1},  {false, 64, 1, 0, 2}, {true, 32, 1, 2, 3},
                               {true, 16, 1, 3, 4},  {false, 16, 1, 3, 5}, {false, 16, 1, 3, 6},
                               {false, 16, 1, 3, 7}, {true, 8, 1, 7, 8}};
  std::vector<Row> want_on = {{true, 64, 1, 0, 1},  {false, 64, 2, 0, 2}, {true, 64, 1, 2, 3},
                              {true, 32, 1, 3, 4},  {false, 32, 2, 3, 5}, {false, 32, 2, 3, 6},
                              {false, 32, 2, 3, 7}, {true, 32, 1, 7, 8}};
  for (size_t i = 0; i < pattern.size(); ++i) ASSERT_EQ(want_off[i].overflow, pattern[i]);
  {
    SCOPED_TRACE("consecutive_hysteresis=false");
    expectRows(off, want_off);
  }
  {
    SCOPED_TRACE("consecutive_hysteresis=true");
    expectRows(on, want_on);
  }
}

TEST(LossScaler, static_scale_never_changes) {
  LossScalerOptions o;
  o.loss_scale = 1024;
  LossScaler s(o);
  EXPECT_FALSE(s.dynamic());
  for (bool overflow : {true, true, true, false, true}) {
    s.update(overflow);
    EXPECT_EQ(s.scale(), 1024.0);
  }
  EXPECT_EQ(s.overflows(), 4);
  EXPECT_EQ(s.iteration(), 5);
}

TEST(LossScaler, state_dict_round_trip_continues_bitwise) {
  LossScalerOptions o = dynamicOptions(10, 3, 2);
  o.min_loss_scale = 0.25;
  LossScaler a(o), b(o);
  const std::vector<bool> before = {true, false, true, true, false, false, false, true, false};
  for (bool f : before) a.update(f);
  b.loadStateDict(a.stateDict());
  EXPECT_EQ(b.stateDict(), a.stateDict());
  for (bool f : {false, true, true, false, false, false, false, true}) {
    a.update(f);
    b.update(f);
    EXPECT_EQ(b.scale(), a.scale());
    EXPECT_EQ(b.stateDict(), a.stateDict());
  }
}

TEST(LossScaler, load_state_dict_rejects_bad_states_naming_the_key) {
  LossScaler dyn(LossScalerOptions{});
  LossScalerOptions so;
  so.loss_scale = 8;
  LossScaler st(so);
  auto expectError = [](LossScaler& s, const HyperParams& h, const std::string& key) {
    try {
      s.loadStateDict(h);
      ADD_FAILURE() << "expected a ValueError naming " << key;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  expectError(dyn, st.stateDict(), "static");
  HyperParams h = dyn.stateDict();
  h.erase("cur_hysteresis");
  expectError(dyn, h, "cur_hysteresis");
  h = dyn.stateDict();
  h["cur_hysteresis"] = int64_t{3};
  expectError(dyn, h, "cur_hysteresis");
  h = dyn.stateDict();
  h["cur_scale"] = -1.0;
  expectError(dyn, h, "cur_scale");
  h = dyn.stateDict();
  h["last_overflow_iter"] = int64_t{0};  // cur_iter is 0: no overflow can have happened
  expectError(dyn, h, "last_overflow_iter");
}

TEST(LossScaler, options_out_of_range_are_a_value_error_naming_the_key) {
  auto expectError = [](LossScalerOptions o, const std::string& key) {
    try {
      LossScaler s(o);
      ADD_FAILURE() << "expected a ValueError naming " << key;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  LossScalerOptions o;
  o.loss_scale = -1;
  expectError(o, "loss_scale");
  o = {};
  o.loss_scale_window = 0;
  expectError(o, "loss_scale_window");
  o.loss_scale_window = -5;
  expectError(o, "loss_scale_window");
  o = {};
  o.hysteresis = 0;
  expectError(o, "hysteresis");
  o = {};
  o.min_loss_scale = 0;
  expectError(o, "min_loss_scale");
  o = {};
  o.initial_scale_power = 65;
  expectError(o, "initial_scale_power");
  o = {};
  o.initial_scale_power = 2;
  o.min_loss_scale = 8;
  expectError(o, "min_loss_scale");
  o = {};
  o.scale_factor = 1;
  expectError(o, "scale_factor");
}
