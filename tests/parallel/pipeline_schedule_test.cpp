// Pipeline schedules as event orders, checked without processes: every micro-batch once each
// way, neighbours transferring in the same order, no deadlock even with sends that wait for their
// receiver, 1F1B's memory bound and both schedules' bubble.
#include <gtest/gtest.h>

#include <set>
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

TEST(PipelineSchedule, stages_with_costs_of_their_own_idle_as_their_critical_path_says) {
  const PipelineShape shape{2, 8};
  const auto lists = allStages(PipelineScheduleKind::one_f_one_b, shape);
  // The same costs given per stage: the uniform result.
  PipelineCosts same;
  same.stage_forward = {{1.0}, {1.0}};
  same.stage_backward = {{2.0}, {2.0}};
  const PipelineTimeline u = simulatePipeline(lists, PipelineCosts{1, 2}), p = simulatePipeline(lists, same);
  EXPECT_DOUBLE_EQ(p.makespan, u.makespan);
  EXPECT_EQ(p.idle_fraction, u.idle_fraction);
  // Each stage's own window ends with its last action: the last stage's before the first's, so it
  // counts less idle than the common makespan gives.
  EXPECT_LT(u.own_idle_fraction[1], u.idle_fraction[1]);
  EXPECT_DOUBLE_EQ(u.own_idle_fraction[0], u.idle_fraction[0]);
  // A last stage 1.5x as slow (it holds the head) sets the pace: it computes without a break after
  // the first forward, and the first stage waits for it.
  PipelineCosts slow_last;
  slow_last.stage_forward = {{1.0}, {1.5}};
  slow_last.stage_backward = {{2.0}, {3.0}};
  const PipelineTimeline t = simulatePipeline(lists, slow_last);
  EXPECT_DOUBLE_EQ(t.makespan, 1.0 + 8 * 4.5 + 2.0);
  EXPECT_NEAR(t.own_idle_fraction[1], 1.0 / 37.0, 1e-12);
  EXPECT_NEAR(t.own_idle_fraction[0], 1.0 - 24.0 / 39.0, 1e-12);
  EXPECT_GT(t.own_idle_fraction[0], theoreticalBubble(shape));
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

namespace {

// Runs f for interleaved 1F1B on 2..5 stages, 2..4 chunks and 1..3 rounds of micro-batches.
template <typename F>
void forEachInterleavedShape(F f) {
  for (int64_t s = 2; s <= 5; ++s)
    for (int64_t v = 2; v <= 4; ++v)
      for (int64_t rounds = 1; rounds <= 3; ++rounds) f(PipelineShape{s, rounds * s, v});
}

std::string where(const PipelineShape& shape) {
  return where(PipelineScheduleKind::interleaved_1f1b, shape) + " x " + std::to_string(shape.chunks) +
         " chunks";
}

std::vector<std::vector<PipelineAction>> allInterleaved(const PipelineShape& shape) {
  return allStages(PipelineScheduleKind::interleaved_1f1b, shape);
}

}  // namespace

TEST(PipelineSchedule, interleaved_runs_every_chunk_of_every_micro_batch_forward_then_backward) {
  forEachInterleavedShape([](const PipelineShape& shape) {
    for (int64_t s = 0; s < shape.stages; ++s) {
      std::vector<int> forwarded(static_cast<size_t>(shape.micro_batches * shape.chunks), 0);
      std::vector<int> backwarded = forwarded;
      for (const auto& a : pipelineActions(PipelineScheduleKind::interleaved_1f1b, shape, s)) {
        const auto i = static_cast<size_t>(a.chunk * shape.micro_batches + a.micro_batch);
        if (a.op == PipelineOp::forward) ++forwarded[i];
        if (a.op == PipelineOp::backward) {
          EXPECT_EQ(forwarded[i], 1) << where(shape) << ", stage " << s;
          ++backwarded[i];
        }
        // Stage 0's chunk 0 takes the data, the last stage's last chunk makes the loss.
        if (a.op == PipelineOp::recv_activation) {
          EXPECT_FALSE(s == 0 && a.chunk == 0) << where(shape);
        }
        if (a.op == PipelineOp::send_activation) {
          EXPECT_FALSE(s + 1 == shape.stages && a.chunk + 1 == shape.chunks) << where(shape);
        }
      }
      EXPECT_EQ(forwarded, std::vector<int>(forwarded.size(), 1)) << where(shape);
      EXPECT_EQ(backwarded, std::vector<int>(backwarded.size(), 1)) << where(shape);
    }
  });
}

TEST(PipelineSchedule, interleaved_computes_in_megatrons_order) {
  // 2 stages x 2 chunks x 4 micro-batches. Stage 0 warms up with 2 (S - 1) + (V - 1) S = 4
  // forwards: micro-batches 0, 1 of chunk 0, then of chunk 1; stage 1 with 2.
  using Op = PipelineOp;
  const std::vector<std::vector<PipelineAction>> expected = {{{Op::forward, 0, 0},
                                                              {Op::forward, 1, 0},
                                                              {Op::forward, 0, 1},
                                                              {Op::forward, 1, 1},
                                                              {Op::forward, 2, 0},
                                                              {Op::backward, 0, 1},
                                                              {Op::forward, 3, 0},
                                                              {Op::backward, 1, 1},
                                                              {Op::forward, 2, 1},
                                                              {Op::backward, 0, 0},
                                                              {Op::forward, 3, 1},
                                                              {Op::backward, 1, 0},
                                                              {Op::backward, 2, 1},
                                                              {Op::backward, 3, 1},
                                                              {Op::backward, 2, 0},
                                                              {Op::backward, 3, 0}},
                                                             {{Op::forward, 0, 0},
                                                              {Op::forward, 1, 0},
                                                              {Op::forward, 0, 1},
                                                              {Op::backward, 0, 1},
                                                              {Op::forward, 1, 1},
                                                              {Op::backward, 1, 1},
                                                              {Op::forward, 2, 0},
                                                              {Op::backward, 0, 0},
                                                              {Op::forward, 3, 0},
                                                              {Op::backward, 1, 0},
                                                              {Op::forward, 2, 1},
                                                              {Op::backward, 2, 1},
                                                              {Op::forward, 3, 1},
                                                              {Op::backward, 3, 1},
                                                              {Op::backward, 2, 0},
                                                              {Op::backward, 3, 0}}};
  for (int64_t s = 0; s < 2; ++s) {
    std::vector<PipelineAction> compute;
    for (const auto& a : pipelineActions(PipelineScheduleKind::interleaved_1f1b, {2, 4, 2}, s))
      if (a.op == Op::forward || a.op == Op::backward) compute.push_back(a);
    EXPECT_EQ(compute, expected[static_cast<size_t>(s)]) << "stage " << s;
  }
}

TEST(PipelineSchedule, interleaved_never_deadlocks_and_shrinks_the_bubble_by_the_chunks) {
  EXPECT_DOUBLE_EQ(theoreticalBubble({4, 8, 2}), 3.0 / 19.0);
  forEachInterleavedShape([](const PipelineShape& shape) {
    const double v = static_cast<double>(shape.chunks);
    for (PipelineCosts costs : {PipelineCosts{1 / v, 1 / v}, PipelineCosts{1 / v, 2 / v}}) {
      PipelineTimeline t;
      ASSERT_NO_THROW(t = simulatePipeline(allInterleaved(shape), costs)) << where(shape);
      const double plain =
          simulatePipeline(allStages(PipelineScheduleKind::one_f_one_b, {shape.stages, shape.micro_batches}),
                           {costs.forward * v, costs.backward * v})
              .idle_fraction.front();
      for (double idle : t.idle_fraction) {
        EXPECT_LT(idle, plain) << where(shape);
        EXPECT_NEAR(idle, theoreticalBubble(shape), 1e-9) << where(shape) << " F " << costs.forward;
      }
    }
  });
}

TEST(PipelineSchedule, interleaved_holds_its_warmup_of_chunk_activations) {
  forEachInterleavedShape([](const PipelineShape& shape) {
    for (int64_t s = 0; s < shape.stages; ++s) {
      const auto actions = pipelineActions(PipelineScheduleKind::interleaved_1f1b, shape, s);
      const int64_t total = shape.micro_batches * shape.chunks;
      const int64_t warmup = std::min(total, 2 * (shape.stages - s - 1) + (shape.chunks - 1) * shape.stages);
      EXPECT_EQ(peakActivationsInFlight(actions), std::min(total, warmup + 1)) << where(shape);
      int64_t per_chunk = 0;
      for (int64_t c = 0; c < shape.chunks; ++c) {
        per_chunk += peakActivationsInFlight(actions, c);
        // Receives are posted ahead, so a chunk holds at least as many inputs as activations.
        EXPECT_GE(peakInputsHeld(actions, c), peakActivationsInFlight(actions, c)) << where(shape);
      }
      EXPECT_GE(per_chunk, peakActivationsInFlight(actions)) << where(shape);
    }
  });
}

TEST(PipelineSchedule, interleaved_settings_that_cannot_run_are_errors_naming_the_key) {
  EXPECT_EQ(parsePipelineSchedule("interleaved_1f1b"), PipelineScheduleKind::interleaved_1f1b);
  EXPECT_EQ(parsePipelineSchedule("Interleaved1F1B"), PipelineScheduleKind::interleaved_1f1b);
  EXPECT_EQ(parsePipelineSchedule("GPipe"), PipelineScheduleKind::gpipe);
  auto message = [](PipelineScheduleKind kind, const PipelineShape& shape) {
    try {
      checkPipelineShape(kind, shape);
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  using K = PipelineScheduleKind;
  EXPECT_NE(message(K::interleaved_1f1b, {2, 4, 1}).find("needs pipeline.virtual_stages >= 2"),
            std::string::npos);
  EXPECT_NE(message(K::interleaved_1f1b, {1, 4, 2}).find("needs pipeline.stages >= 2"), std::string::npos);
  EXPECT_NE(message(K::interleaved_1f1b, {4, 6, 2}).find("gradient_accumulation_steps 6 must be a multiple"),
            std::string::npos);
  EXPECT_NE(message(K::one_f_one_b, {2, 4, 2}).find("pipeline.virtual_stages is 2 but schedule 1f1b"),
            std::string::npos);
  EXPECT_EQ(message(K::interleaved_1f1b, {4, 8, 3}), "no error");
}

TEST(PipelineSchedule, every_schedules_inputs_fit_their_slots_without_two_in_one) {
  // The executor keeps micro-batch m of a chunk in slot m % peakInputsHeld, from its receive (or
  // forward) to its gradient's send (or backward): no slot may hold two micro-batches at once.
  auto check = [](PipelineScheduleKind kind, const PipelineShape& shape) {
    for (int64_t s = 0; s < shape.stages; ++s) {
      const auto actions = pipelineActions(kind, shape, s);
      for (int64_t c = 0; c < shape.chunks; ++c) {
        const int64_t slots = peakInputsHeld(actions, c);
        std::vector<int64_t> held(static_cast<size_t>(slots), -1);
        std::set<int64_t> sends_grad;
        for (const auto& a : actions)
          if (a.chunk == c && a.op == PipelineOp::send_grad) sends_grad.insert(a.micro_batch);
        for (const auto& a : actions) {
          if (a.chunk != c) continue;
          int64_t& slot = held[static_cast<size_t>(a.micro_batch % slots)];
          if (a.op == PipelineOp::recv_activation || (a.op == PipelineOp::forward && slot != a.micro_batch)) {
            EXPECT_EQ(slot, -1) << where(kind, shape) << " stage " << s << " chunk " << c << ": "
                                << toString(a) << " finds micro-batch " << slot << " in its slot";
            slot = a.micro_batch;
          }
          if (a.op == (sends_grad.count(a.micro_batch) ? PipelineOp::send_grad : PipelineOp::backward))
            slot = -1;
        }
      }
    }
  };
  forEachShape([&](PipelineScheduleKind kind, const PipelineShape& shape) { check(kind, shape); });
  forEachInterleavedShape(
      [&](const PipelineShape& shape) { check(PipelineScheduleKind::interleaved_1f1b, shape); });
}
