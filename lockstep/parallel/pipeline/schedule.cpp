#include "lockstep/parallel/pipeline/schedule.h"

#include <algorithm>

#include "lockstep/util/error.h"

namespace lockstep::parallel {

namespace {

void checkShape(const PipelineShape& shape, int64_t stage) {
  LOCKSTEP_ENFORCE(shape.stages >= 1, ValueError, "pipeline.stages must be at least 1, got ", shape.stages);
  LOCKSTEP_ENFORCE(shape.micro_batches >= 1, ValueError,
                   "a pipeline needs at least one micro-batch (gradient_accumulation_steps), got ",
                   shape.micro_batches);
  LOCKSTEP_ENFORCE(stage >= 0 && stage < shape.stages, ValueError, "pipeline stage ", stage,
                   " is outside 0..", shape.stages - 1);
}

// A micro-batch's forward or backward on `stage` with the transfers around it.
void appendForward(std::vector<PipelineAction>& out, const PipelineShape& shape, int64_t stage, int64_t m) {
  if (stage > 0) out.push_back({PipelineOp::recv_activation, m});
  out.push_back({PipelineOp::forward, m});
  if (stage + 1 < shape.stages) out.push_back({PipelineOp::send_activation, m});
}

void appendBackward(std::vector<PipelineAction>& out, const PipelineShape& shape, int64_t stage, int64_t m) {
  if (stage + 1 < shape.stages) out.push_back({PipelineOp::recv_grad, m});
  out.push_back({PipelineOp::backward, m});
  if (stage > 0) out.push_back({PipelineOp::send_grad, m});
}

std::vector<PipelineAction> gpipe(const PipelineShape& shape, int64_t stage) {
  std::vector<PipelineAction> out;
  for (int64_t m = 0; m < shape.micro_batches; ++m) appendForward(out, shape, stage, m);
  for (int64_t m = 0; m < shape.micro_batches; ++m) appendBackward(out, shape, stage, m);
  return out;
}

bool isEven(int64_t v) { return v % 2 == 0; }

// DeepSpeed's TrainSchedule._step_to_micro_batch: which micro-batch `stage` runs at clock step
// `step`, and whether forward; the id may be outside 0..M-1 (the stage idles).
std::pair<int64_t, bool> stepToMicroBatch(const PipelineShape& shape, int64_t stage, int64_t step) {
  const int64_t s = shape.stages;
  if (isEven(step) && isEven(stage)) return {step / 2 - stage / 2, true};
  if (!isEven(step) && !isEven(stage)) return {(step - 1) / 2 - stage / 2, true};
  if (isEven(step)) return {step / 2 - s + (stage + 1) / 2, false};  // odd stage
  return {(step - 1) / 2 - s + 1 + stage / 2, false};                // even stage, odd step
}

std::vector<PipelineAction> oneForwardOneBackward(const PipelineShape& shape, int64_t stage) {
  std::vector<PipelineAction> out;
  auto valid = [&](int64_t m) { return m >= 0 && m < shape.micro_batches; };
  const bool has_prev = stage > 0, has_next = stage + 1 < shape.stages;
  int64_t prev = -1;
  const int64_t steps = 2 * (shape.micro_batches + shape.stages - 1);
  for (int64_t step = 0; step < steps; ++step) {
    const auto [m, is_forward] = stepToMicroBatch(shape, stage, step);
    // The transfers of the previous step's result and this step's input, in DeepSpeed's order:
    // on a link, one side's forward step meets the other side's backward step.
    if (is_forward) {
      if (valid(prev) && has_prev) out.push_back({PipelineOp::send_grad, prev});
      if (valid(m) && has_prev) out.push_back({PipelineOp::recv_activation, m});
    } else {
      if (valid(m) && has_next) out.push_back({PipelineOp::recv_grad, m});
      if (valid(prev) && has_next) out.push_back({PipelineOp::send_activation, prev});
    }
    if (valid(m)) out.push_back({is_forward ? PipelineOp::forward : PipelineOp::backward, m});
    prev = m;
  }
  return out;
}

}  // namespace

PipelineScheduleKind parsePipelineSchedule(const std::string& name) {
  if (name == "gpipe") return PipelineScheduleKind::gpipe;
  if (name == "1f1b") return PipelineScheduleKind::one_f_one_b;
  throw ValueError("pipeline.schedule '" + name +
                   "' is unknown; use 1f1b (one forward, one backward: at most `stages` micro-batches of "
                   "activations held) or gpipe (all forwards, then all backwards)");
}

const char* pipelineScheduleName(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::gpipe ? "gpipe" : "1f1b";
}

const char* pipelineOpName(PipelineOp op) {
  switch (op) {
    case PipelineOp::recv_activation:
      return "recv_activation";
    case PipelineOp::forward:
      return "forward";
    case PipelineOp::send_activation:
      return "send_activation";
    case PipelineOp::recv_grad:
      return "recv_grad";
    case PipelineOp::backward:
      return "backward";
    case PipelineOp::send_grad:
      return "send_grad";
    case PipelineOp::reduce_grads:
      return "reduce_grads";
    case PipelineOp::optimizer_step:
      return "optimizer_step";
  }
  return "?";
}

std::string toString(const PipelineAction& action) {
  std::string s = pipelineOpName(action.op);
  if (action.micro_batch >= 0) s += " " + std::to_string(action.micro_batch);
  return s;
}

std::vector<PipelineAction> pipelineActions(PipelineScheduleKind kind, const PipelineShape& shape,
                                            int64_t stage) {
  checkShape(shape, stage);
  std::vector<PipelineAction> out =
      kind == PipelineScheduleKind::gpipe ? gpipe(shape, stage) : oneForwardOneBackward(shape, stage);
  out.push_back({PipelineOp::reduce_grads});
  out.push_back({PipelineOp::optimizer_step});
  return out;
}

int64_t peakActivationsInFlight(const std::vector<PipelineAction>& actions) {
  int64_t live = 0, peak = 0;
  for (const auto& a : actions) {
    if (a.op == PipelineOp::forward) peak = std::max(peak, ++live);
    if (a.op == PipelineOp::backward) --live;
  }
  return peak;
}

double theoreticalBubble(const PipelineShape& shape) {
  checkShape(shape, 0);
  return static_cast<double>(shape.stages - 1) / static_cast<double>(shape.micro_batches + shape.stages - 1);
}

}  // namespace lockstep::parallel
