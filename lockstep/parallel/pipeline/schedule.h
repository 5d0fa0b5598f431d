#pragma once
// Pipeline schedules as event orders: for S stages and M micro-batches, the ordered actions each
// stage runs in one training step (compute, point-to-point transfers, the gradient phase). Pure
// functions, unit-tested without processes; the executor runs them as they are listed, so the
// order is the contract between neighbouring stages: stage s's sends to stage s + 1 come in the
// order stage s + 1 receives them, and no stage waits on a neighbour that waits on it, even when a
// send only completes once the peer receives (the process group runs each rank's ops in issue
// order on one thread).
//
//   gpipe  GPipe (torch.distributed.pipelining's ScheduleGPipe): every micro-batch's forward, then
//          every backward, in micro-batch order. A stage holds all M micro-batches' activations.
//   1f1b   One forward, one backward (DeepSpeed's TrainSchedule, torch's Schedule1F1B): stage s
//          runs S - s - 1 warm-up forwards, then alternates forward and backward, then the
//          remaining backwards; it holds at most S - s micro-batches' activations. The order is
//          DeepSpeed's: 2 (M + S - 1) clock steps, forwards on even steps on even stages and odd
//          steps on odd stages, an activation sent on the step after its forward, together with
//          the receive of a gradient, so that both sides of every link transfer in the same order.
// Both idle for the same theoretical fraction (S - 1) / (M + S - 1) of a step (the bubble).
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::parallel {

enum class PipelineScheduleKind { gpipe, one_f_one_b };

/// "gpipe" or "1f1b" (pipeline.schedule); ValueError naming the key and the choices otherwise.
PipelineScheduleKind parsePipelineSchedule(const std::string& name);
const char* pipelineScheduleName(PipelineScheduleKind kind);

enum class PipelineOp {
  recv_activation,  // the stage's input of a micro-batch, from stage - 1
  forward,
  send_activation,  // the stage's output, to stage + 1
  recv_grad,        // the gradient of the stage's output, from stage + 1
  backward,
  send_grad,     // the gradient of the stage's input, to stage - 1
  reduce_grads,  // the step's gradients are complete: data-parallel and tied reductions
  optimizer_step,
};
const char* pipelineOpName(PipelineOp op);

struct PipelineAction {
  PipelineOp op;
  /// The micro-batch (0 .. M - 1); -1 for reduce_grads and optimizer_step.
  int64_t micro_batch = -1;
  bool operator==(const PipelineAction&) const = default;
};
/// "forward 3", "send_activation 0", "optimizer_step".
std::string toString(const PipelineAction& action);

struct PipelineShape {
  int64_t stages = 1;
  int64_t micro_batches = 1;
};

/// The actions of `stage` in one training step: each micro-batch's forward and backward once, the
/// transfers with the neighbouring stages (none before the first stage or after the last), then
/// reduce_grads and optimizer_step. ValueError for stages < 1, micro_batches < 1 or a stage
/// outside 0 .. stages - 1.
std::vector<PipelineAction> pipelineActions(PipelineScheduleKind kind, const PipelineShape& shape,
                                            int64_t stage);

/// The most micro-batches whose forward has run and backward has not, at any point of `actions`:
/// how many micro-batches' activations the stage holds at its peak.
int64_t peakActivationsInFlight(const std::vector<PipelineAction>& actions);

/// The schedule's theoretical idle fraction of each stage, (S - 1) / (M + S - 1), for forwards and
/// backwards of equal cost on every stage and free transfers.
double theoreticalBubble(const PipelineShape& shape);

}  // namespace lockstep::parallel
