// Pipeline schedules as event orders, checked without processes: every micro-batch once each
// way, neighbours transferring in the same order, no deadlock even with sends that wait for their
// receiver, 1F1B's memory bound and both schedules' bubble.
#include <gtest/gtest.h>

#include <string>

#include "lockstep/parallel/pipeline/schedule.h"
#include "lockstep/parallel/pipeline/simulation.h"
#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::parallel;

namespace {

constexpr PipelineScheduleKind kKinds[] = {PipelineScheduleKind::gpipe, PipelineScheduleKind::one_f_one_b};

std::vector<std::vector<PipelineAction>> allStages(PipelineScheduleKind kind, const PipelineShape& shape) {
  std::vector<std::vector<PipelineAction>> out;
  for (int64_t s = 0; s < shape.stages; ++s) out.push_back(pipelineActions(kind, shape, s));
  return out;
}

std::vector<int64_t> microBatchesOf(const std::vector<PipelineAction>& actions, PipelineOp op) {
  std::vector<int64_t> out;
  for (const auto& a : actions)
    if (a.op == op) out.push_back(a.micro_batch);
  return out;
}

// Runs f for every schedule, 1..5 stages and 1..9 micro-batches.
template <typename F>
void forEachShape(F f) {
  for (auto kind : kKinds)
    for (int64_t s = 1; s <= 5; ++s)
      for (int64_t m = 1; m <= 9; ++m) f(kind, PipelineShape{s, m});
}

std::string where(PipelineScheduleKind kind, const PipelineShape& shape) {
  return std::string(pipelineScheduleName(kind)) + " " + std::to_string(shape.stages) + " stages x " +
         std::to_string(shape.micro_batches) + " micro-batches";
}

}  // namespace

TEST(PipelineSchedule, every_micro_batch_runs_forward_then_backward_once_per_stage) {
  forEachShape([](PipelineScheduleKind kind, const PipelineShape& shape) {
    for (int64_t s = 0; s < shape.stages; ++s) {
      auto actions = pipelineActions(kind, shape, s);
      std::vector<int> forwarded(static_cast<size_t>(shape.micro_batches), 0), backwarded = forwarded;
      for (const auto& a : actions) {
        if (a.op == PipelineOp::forward) ++forwarded[static_cast<size_t>(a.micro_batch)];
        if (a.op == PipelineOp::backward) {
          EXPECT_EQ(forwarded[static_cast<size_t>(a.micro_batch)], 1)
              << where(kind, shape) << ", stage " << s;
          ++backwarded[static_cast<size_t>(a.micro_batch)];
        }
      }
      EXPECT_EQ(forwarded, std::vector<int>(forwarded.size(), 1)) << where(kind, shape);
      EXPECT_EQ(backwarded, std::vector<int>(backwarded.size(), 1)) << where(kind, shape);
      // The gradient phase closes the step.
      ASSERT_GE(actions.size(), 2u);
      EXPECT_EQ(actions[actions.size() - 2].op, PipelineOp::reduce_grads);
      EXPECT_EQ(actions.back().op, PipelineOp::optimizer_step);
      // The first stage receives nothing, the last sends nothing forward.
      if (s == 0) {
        EXPECT_TRUE(microBatchesOf(actions, PipelineOp::recv_activation).empty());
      }
      if (s + 1 == shape.stages) {
        EXPECT_TRUE(microBatchesOf(actions, PipelineOp::send_activation).empty());
      }
    }
  });
}

TEST(PipelineSchedule, neighbours_send_and_receive_in_the_same_order) {
  forEachShape([](PipelineScheduleKind kind, const PipelineShape& shape) {
    auto stages = allStages(kind, shape);
    for (size_t s = 0; s + 1 < stages.size(); ++s) {
      EXPECT_EQ(microBatchesOf(stages[s], PipelineOp::send_activation),
                microBatchesOf(stages[s + 1], PipelineOp::recv_activation))
          << where(kind, shape) << ", link " << s;
      EXPECT_EQ(microBatchesOf(stages[s + 1], PipelineOp::send_grad),
                microBatchesOf(stages[s], PipelineOp::recv_grad))
          << where(kind, shape) << ", link " << s;
      // Each activation leaves after its forward, each gradient after its backward.
      EXPECT_EQ(microBatchesOf(stages[s], PipelineOp::send_activation).size(),
                static_cast<size_t>(shape.micro_batches));
    }
  });
}

TEST(PipelineSchedule, no_schedule_deadlocks_when_sends_wait_for_their_receiver) {
  forEachShape([](PipelineScheduleKind kind, const PipelineShape& shape) {
    EXPECT_NO_THROW(simulatePipeline(allStages(kind, shape))) << where(kind, shape);
  });
}

TEST(PipelineSchedule, a_naive_one_f_one_b_order_deadlocks_and_the_simulation_says_where) {
  // Stage 0 sends each activation right after its forward; stage 1 sends micro-batch 0's gradient
  // before it receives micro-batch 1: each waits for the other (why 1F1B pairs the sends of one
  // step with the receives of the next, as DeepSpeed does).
  using Op = PipelineOp;
  std::vector<std::vector<PipelineAction>> stages = {{{Op::forward, 0},
                                                      {Op::send_activation, 0},
                                                      {Op::forward, 1},
                                                      {Op::send_activation, 1},
                                                      {Op::recv_grad, 0},
                                                      {Op::backward, 0},
                                                      {Op::recv_grad, 1},
                                                      {Op::backward, 1}},
                                                     {{Op::recv_activation, 0},
                                                      {Op::forward, 0},
                                                      {Op::backward, 0},
                                                      {Op::send_grad, 0},
                                                      {Op::recv_activation, 1},
                                                      {Op::forward, 1},
                                                      {Op::backward, 1},
                                                      {Op::send_grad, 1}}};
  try {
    simulatePipeline(stages);
    FAIL() << "expected a deadlock";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage 0 at send_activation 1; stage 1 at send_grad 0"),
              std::string::npos)
        << e.what();
  }
  // Orders that disagree on the micro-batch are refused, not matched.
  std::vector<std::vector<PipelineAction>> crossed = {{{Op::forward, 0}, {Op::send_activation, 0}},
                                                      {{Op::recv_activation, 1}, {Op::forward, 1}}};
  EXPECT_THROW(simulatePipeline(crossed), Error);
}

TEST(PipelineSchedule, one_f_one_b_holds_at_most_stages_minus_stage_activations_gpipe_all) {
  forEachShape([](PipelineScheduleKind kind, const PipelineShape& shape) {
    for (int64_t s = 0; s < shape.stages; ++s) {
      const int64_t peak = peakActivationsInFlight(pipelineActions(kind, shape, s));
      const int64_t expected = kind == PipelineScheduleKind::gpipe
                                   ? shape.micro_batches
                                   : std::min(shape.stages - s, shape.micro_batches);
      EXPECT_EQ(peak, expected) << where(kind, shape) << ", stage " << s;
    }
  });
}

TEST(PipelineSchedule, one_f_one_b_is_warmup_forwards_then_alternation_then_cooldown) {
  // torch's Schedule1F1B: stages - stage - 1 warm-up forwards, then forward, backward, ..., then
  // the remaining backwards. DeepSpeed's clock-step order computes in exactly that order.
  for (int64_t stages = 1; stages <= 5; ++stages) {
    for (int64_t m = 1; m <= 9; ++m) {
      for (int64_t s = 0; s < stages; ++s) {
        std::vector<PipelineAction> expected;
        const int64_t warmup = std::min(stages - s - 1, m);
        int64_t f = 0, b = 0;
        for (; f < warmup; ++f) expected.push_back({PipelineOp::forward, f});
        for (; f < m; ++f, ++b) {
          expected.push_back({PipelineOp::forward, f});
          expected.push_back({PipelineOp::backward, b});
        }
        for (; b < m; ++b) expected.push_back({PipelineOp::backward, b});
        std::vector<PipelineAction> compute;
        for (const auto& a : pipelineActions(PipelineScheduleKind::one_f_one_b, {stages, m}, s))
          if (a.op == PipelineOp::forward || a.op == PipelineOp::backward) compute.push_back(a);
        EXPECT_EQ(compute, expected) << stages << " stages, " << m << " micro-batches, stage " << s;
      }
    }
  }
}

TEST(PipelineSchedule, both_schedules_idle_for_the_theoretical_bubble) {
  EXPECT_DOUBLE_EQ(theoreticalBubble({4, 8}), 3.0 / 11.0);
  EXPECT_DOUBLE_EQ(theoreticalBubble({1, 8}), 0.0);
  forEachShape([](PipelineScheduleKind kind, const PipelineShape& shape) {
    // Backward twice the forward, as for most layers: the same fraction.
    for (PipelineCosts costs : {PipelineCosts{1, 1}, PipelineCosts{1, 2}}) {
      PipelineTimeline t = simulatePipeline(allStages(kind, shape), costs);
      const double step =
          static_cast<double>(shape.micro_batches + shape.stages - 1) * (costs.forward + costs.backward);
      EXPECT_DOUBLE_EQ(t.makespan, step) << where(kind, shape);
      for (double idle : t.idle_fraction)
        EXPECT_NEAR(idle, theoreticalBubble(shape), 1e-12) << where(kind, shape);
    }
  });
}

TEST(PipelineSchedule, bad_settings_are_errors_naming_the_key) {
  EXPECT_EQ(parsePipelineSchedule("1f1b"), PipelineScheduleKind::one_f_one_b);
  EXPECT_EQ(parsePipelineSchedule("gpipe"), PipelineScheduleKind::gpipe);
  try {
    parsePipelineSchedule("interleaved");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline.schedule 'interleaved' is unknown"), std::string::npos);
  }
  EXPECT_THROW(pipelineActions(PipelineScheduleKind::gpipe, {2, 0}, 0), ValueError);
  EXPECT_THROW(pipelineActions(PipelineScheduleKind::gpipe, {2, 4}, 2), ValueError);
  EXPECT_THROW(pipelineActions(PipelineScheduleKind::gpipe, {0, 4}, 0), ValueError);
}
