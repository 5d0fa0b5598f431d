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
//   interleaved_1f1b
//          Interleaved 1F1B (torch's ScheduleInterleaved1F1B, Megatron-LM's virtual pipeline): the
//          layers are cut into S x V parts, rank s holding V of them (its chunks: parts s, s + S,
//          ..., so the activations go round the ranks V times). Megatron's compute order: in
//          rounds of S micro-batches, forwards chunk by chunk, 2 (S - s - 1) + (V - 1) S warm-up
//          forwards, then one forward one backward, then the remaining backwards; it needs M a
//          multiple of S. Each compute is 1/V of a stage's, so the bubble shrinks to
//          (S - 1) / (V M + S - 1), for more activations held (a chunk's each). The transfers are
//          placed by a timeline of that order (forward 1, backward 2): every rank issues its
//          transfers in the order of the times the timeline gives them, one order for the whole
//          job, which no rank can wait on out of turn, so it cannot deadlock.
#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::parallel {

enum class PipelineScheduleKind { gpipe, one_f_one_b, interleaved_1f1b };

/// "gpipe", "1f1b" or "interleaved_1f1b" (pipeline.schedule; torch's names GPipe, 1F1B and
/// Interleaved1F1B too, any case); ValueError naming the key and the choices otherwise.
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
  /// Which of the rank's chunks (virtual stages) it concerns: 0 but for interleaved_1f1b. A
  /// transfer's chunk is the one on this rank that produced or will use the data.
  int64_t chunk = 0;
  bool operator==(const PipelineAction&) const = default;
};
/// "forward 3", "send_activation 0", "optimizer_step"; "forward 3 chunk 1" beyond chunk 0.
std::string toString(const PipelineAction& action);

struct PipelineShape {
  int64_t stages = 1;
  int64_t micro_batches = 1;
  /// Chunks (virtual stages) per rank: 1, but >= 2 for interleaved_1f1b.
  int64_t chunks = 1;
  /// Parts the layers are cut into: stages x chunks; part p runs on rank p % stages as its chunk
  /// p / stages.
  int64_t parts() const { return stages * chunks; }
};

/// The checks pipelineActions makes of a shape for a schedule, before any rank starts:
/// ValueError naming pipeline.stages, pipeline.virtual_stages or gradient_accumulation_steps.
void checkPipelineShape(PipelineScheduleKind kind, const PipelineShape& shape);

/// The actions of `stage` in one training step: each micro-batch's forward and backward once, the
/// transfers with the neighbouring stages (none before the first stage or after the last), then
/// reduce_grads and optimizer_step. ValueError for a shape checkPipelineShape refuses or a stage
/// outside 0 .. stages - 1.
std::vector<PipelineAction> pipelineActions(PipelineScheduleKind kind, const PipelineShape& shape,
                                            int64_t stage);

/// The most micro-batches whose forward has run and backward has not, at any point of `actions`
/// (of `chunk` only, when given): how many micro-batches' activations the stage holds at its peak.
int64_t peakActivationsInFlight(const std::vector<PipelineAction>& actions, int64_t chunk = -1);

/// The most micro-batches whose input `chunk` holds at any point of `actions`, each from its
/// receive (the buffer is posted then) or forward to the send of its input's gradient (or its
/// backward): how many input slots the chunk needs. A chunk's inputs arrive and leave in
/// micro-batch order, so micro-batch m can live in slot m % that.
int64_t peakInputsHeld(const std::vector<PipelineAction>& actions, int64_t chunk);

/// The schedule's theoretical idle fraction of each stage, (S - 1) / (V M + S - 1) (V = chunks, 1
/// but for interleaved 1F1B), for forwards and backwards of equal cost on every stage and free
/// transfers.
double theoreticalBubble(const PipelineShape& shape);

}  // namespace lockstep::parallel
