#pragma once
// PipelineStage: one rank's part of a model split by layers across the ranks of a process group
// (rank r runs stage r), trained by a pipeline schedule over micro-batches (schedule.h). The
// stage's layers come from the model's layer sequence (nn/layer_sequence.h) cut by
// partitionLayers; with interleaved 1F1B the cut has stages x virtual_stages parts and rank r
// runs parts r, r + S, ... as its chunks. Activations go forward and their gradients back with the
// group's send/recv, their shape agreed once (the first step sends a header), receive buffers
// reused across micro-batches and posted where the schedule says (ahead of the compute that uses
// them, for interleaved 1F1B), sends left running while the stage computes on. Gradients accumulate over the
// micro-batches as those of the mean loss over the whole batch; a parameter tied across stages
// (GPT's embedding and output layer) has its gradient summed over the stages that hold it, so its
// copies stay equal.
//
// Each rank builds the whole model and keeps only its stage's layers in use (the other
// parameters stay untouched): the same seed gives every stage the one model's values.
// Not thread-safe; trainStep is collective over the group.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/nn/layer_sequence.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/parallel/ddp/bucket_assignment.h"
#include "lockstep/parallel/ddp/reducer.h"
#include "lockstep/parallel/pipeline/partition.h"
#include "lockstep/parallel/pipeline/schedule.h"

namespace lockstep::parallel {

/// Where one trainStep's time went on this stage.
struct PipelineStepTimes {
  /// The whole step; its forwards and backwards; and its gradient phase after the schedule (the
  /// tied and replica reductions, the optimizer step when given).
  double wall_s = 0;
  double compute_s = 0;
  double gradient_phase_s = 0;
  /// compute_s by chunk (chunks()) and kind: the micro-batches' forwards and backwards.
  std::vector<double> forward_s, backward_s;
  /// With replicas: the gradient buckets launched while the schedule ran (during the chunks' last
  /// backwards), and all of them; the rest were launched after the schedule (parameters no last
  /// backward reached).
  int64_t replica_buckets_launched_in_backward = 0;
  int64_t replica_buckets = 0;
  /// The fraction of the schedule (the step less its gradient phase) the stage did not compute:
  /// waiting for its neighbours and transfers, the measured bubble, (S - 1) / (M + S - 1) in theory.
  double idleFraction() const {
    const double schedule = wall_s - gradient_phase_s;
    return schedule > 0 ? 1.0 - compute_s / schedule : 0.0;
  }
};

struct PipelineStageOptions {
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  /// Micro-batches per step (DeepSpeed: gradient_accumulation_steps).
  int64_t micro_batches = 1;
  /// How the layers are cut; `stages` must be the group's size (the cut has stages x
  /// virtual_stages parts; explicit boundaries have that many plus one values).
  PartitionOptions partition{};
  /// Chunks of layers per rank (pipeline.virtual_stages; Megatron-LM's virtual pipeline size):
  /// 1, or >= 2 with the interleaved_1f1b schedule.
  int64_t virtual_stages = 1;
  /// DeepSpeed's activation_checkpoint_interval: while training, every run of this many consecutive
  /// layers of the stage is one autograd::checkpoint segment (its input kept, the rest recomputed in
  /// backward), the stage's last run excepted (nn::runBlocks); 0: off.
  int64_t activation_checkpoint_interval = 0;
  /// Pipeline x data parallel: this stage's replicas (PipelineGrid::data). The stage's gradients
  /// are averaged over it in DDP's buckets (`buckets`; DDP's Reducer and allreduce hook), launched
  /// while each chunk's last backward runs (as DDP launches during the backward that is not under
  /// no_sync) and awaited after the schedule, before the tied sums and the optimizer step, so every
  /// replica takes the same update. Null or one rank: no data parallelism.
  std::shared_ptr<comm::ProcessGroup> data_group;
  /// The replicas' gradient buckets (DDP's bucket_cap_mb, 25 MiB by default).
  BucketAssignmentOptions buckets{};
  /// Mixed precision (bf16, f16; nullopt: fp32): the stage's layers run under an
  /// autograd::AutocastGuard of this dtype, as parallel::Engine runs a model's forward; the last
  /// stage's output is widened to f32 before the loss (Engine's rule). Activations and their
  /// gradients travel in the dtype the layers give (bf16 halves the bytes sent). forwardOnly
  /// (evaluation) runs in f32, as `lockstep train` evaluates any model.
  std::optional<DType> autocast{};
  /// Where the stage computes, and so where it receives activations and gradients: nullopt takes
  /// its first parameter's device (the host for a stage without parameters, which a GPU pipeline
  /// must name here, or its neighbours would send GPU buffers it receives on the host).
  std::optional<Device> device{};
  /// With a data group: each replica draws its samples' dropout masks from one process's masks
  /// for the whole global micro-batch (Generator::BatchShare: replica r's sample j is sample
  /// j * replicas + r of it, the strided DistributedSampler's layout), so dropout is one
  /// process's too. false: every replica draws as one process on its own micro-batch, as DDP's
  /// ranks do (faster: no per-sample draws).
  bool one_process_dropout = true;
};

class PipelineStage {
 public:
  /// The loss of one micro-batch's output (the last stage's) against its target, reduced to a scalar
  /// as a mean over the micro-batch.
  using Loss = std::function<autograd::Variable(const autograd::Variable& output, const Tensor& target)>;

  /// Cuts `model`'s layer sequence for group->size() stages. ValueError naming pipeline.stages when
  /// the partition's stage count is not the group's size, and the partition's own errors. The model
  /// must outlive the stage. Not collective.
  PipelineStage(nn::Module& model, std::shared_ptr<comm::ProcessGroup> group,
                const PipelineStageOptions& options);

  int64_t stage() const { return stage_; }
  int64_t stages() const { return stages_; }
  /// Chunks per rank (virtual_stages).
  int64_t chunks() const { return static_cast<int64_t>(chunks_.size()); }
  /// Where the stage computes: options.device, else its parameters' device (the host when it has none).
  /// Activations, gradients and their buffers live there; on a GPU they travel with the group's device path
  /// (NCCL, or through the host where ranks share a GPU), the shape headers through the host.
  Device device() const;
  /// Per chunk, the layers [first, second) of the model's layer sequence it runs.
  std::vector<std::pair<int64_t, int64_t>> layerRanges() const;
  /// This stage's parameters, tied ones included, once each: what its optimizer steps.
  const std::vector<autograd::Variable>& parameters() const { return parameters_; }
  /// This stage's layers, in order (its chunks' one after the other).
  const std::vector<nn::Module*>& layers() const { return layers_; }
  /// The part boundaries of the partition (stages() x chunks() + 1 values; part p runs on stage
  /// p % stages()).
  const std::vector<int64_t>& boundaries() const { return bounds_; }
  /// Whether this stage is the one that answers for `p` (its checkpoint, its share of the gradient
  /// norm): true for every parameter of the stage but a tied one whose first holder is an earlier
  /// stage.
  bool ownsParameter(const autograd::Variable& p) const;
  /// How many micro-batches' activations the stage holds at most: the schedule's peak (1F1B:
  /// min(S - s, M), GPipe: M; interleaved 1F1B: its warm-up forwards plus one, each a chunk's).
  size_t activationSlots() const { return activation_slots_; }
  /// The last trainStep's times.
  const PipelineStepTimes& lastStepTimes() const { return times_; }
  /// Sets the stage's layers to training or evaluation mode.
  void train(bool on = true);

  /// One training step over micro-batches: `inputs` on the first stage (one tensor per micro-batch,
  /// all of one shape), `targets` on the last; other stages pass empty lists. Zeroes the stage's
  /// gradients, runs the schedule, sums tied gradients across stages, then steps `optimizer` (when
  /// given). With a data group, the gradients are averaged over the stage's replicas before the
  /// step. Returns the mean loss over the micro-batches on the last stage, NaN elsewhere.
  /// `loss_scale` (fp16's loss scaler) multiplies every micro-batch's loss before its backward, so
  /// the gradients come out scaled by it (the returned loss is not). Collective over the group.
  /// ValueError for missing micro-batches or a micro-batch whose activation differs in shape from
  /// the first step's.
  double trainStep(const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets, const Loss& loss,
                   optim::Optimizer* optimizer = nullptr, double loss_scale = 1.0);

  /// Clips the gradients of the whole model, as they are after trainStep(..., nullptr): their joint
  /// 2-norm over every stage (a tied parameter counted once) is computed across the group, and each
  /// stage scales its own by min(1, max_norm / (norm + 1e-6)) (torch's clip_grad_norm_). Returns the
  /// norm before clipping. Collective over the group.
  double clipGradNorm(double max_norm);

  /// Evaluation: one batch, of any shape, forward through every stage without gradients: stage 0
  /// runs `input` (ignored elsewhere), the others receive their input with its shape. Returns the
  /// last stage's output, and an undefined Variable on the other stages. Collective over the group.
  autograd::Variable forwardOnly(const Tensor& input);

 private:
  /// One micro-batch's state on a chunk, from its input's receive to its input's gradient sent.
  struct InFlight {
    Tensor input_buffer;                     // where the received activation lands (reused)
    std::shared_ptr<comm::Work> input_recv;  // its receive, posted by recv_activation
    autograd::Variable input;                // the received activation (a leaf) or the first stage's data
    autograd::Variable output;               // the chunk's output (the loss on the last part)
    Tensor grad_buffer;                      // where the output's gradient lands (reused)
    std::shared_ptr<comm::Work> grad_recv;   // its receive, posted by recv_grad
  };
  struct Chunk {
    int64_t part = 0;  // chunk * stages + stage
    std::vector<nn::Module*> layers;
    /// Micro-batch m lives in slot m % slots (peakInputsHeld of the schedule).
    std::vector<InFlight> slots;
    /// The activation shape and dtype this chunk receives and sends, agreed on the first step.
    std::optional<std::pair<Shape, DType>> in_shape, out_shape;
    /// The default generator's counters the parts before this one draw for a micro-batch.
    uint64_t draws_before = 0;
    /// With replicas: averages the gradients of the chunk's parameters over them, armed for the
    /// chunk's last backward (null: no parameter is the chunk's to reduce).
    std::unique_ptr<Reducer> reducer;
    /// The micro-batch of the chunk's last backward in the schedule.
    int64_t last_backward = -1;
  };
  struct PendingSend {
    std::shared_ptr<comm::Work> work;
    Tensor data;  // kept alive until the send completed
  };

  void forward(Chunk& chunk, int64_t m, const std::vector<Tensor>& inputs, const std::vector<Tensor>& targets,
               const Loss& loss);
  void backward(Chunk& chunk, int64_t m);
  /// Waits for the receive a forward or backward `a` computes on (none for the first part's
  /// forward and the last part's backward).
  void awaitReceive(Chunk& chunk, const PipelineAction& a);
  void recvActivation(Chunk& chunk, int64_t m);
  void sendActivation(Chunk& chunk, int64_t m);
  void sendGrad(Chunk& chunk, int64_t m);
  void recvGrad(Chunk& chunk, int64_t m);
  bool isFirstPart(const Chunk& c) const { return c.part == 0; }
  bool isLastPart(const Chunk& c) const { return c.part + 1 == stages_ * chunks(); }
  int prevRank() const { return static_cast<int>((stage_ + stages_ - 1) % stages_); }
  int nextRank() const { return static_cast<int>((stage_ + 1) % stages_); }
  /// forwardOnly's body; `draws` (when given) gets each chunk's count of default-generator draws.
  autograd::Variable forwardThroughChunks(const Tensor& input, std::vector<int64_t>* draws);
  void reduceTiedGrads();
  /// Makes each chunk's Reducer over the data group (first step): a parameter in several chunks is
  /// reduced by the one whose last backward comes last.
  void makeReplicaReducers();
  /// Waits for the replicas' averages (finishing what no last backward launched).
  void finishReplicaGrads();
  void send(const Tensor& t, int peer, int tag);

  std::shared_ptr<comm::ProcessGroup> group_;
  PipelineStageOptions options_;
  nn::LayerSequence sequence_;
  std::vector<int64_t> bounds_;
  int64_t stages_ = 1;
  std::vector<Chunk> chunks_;
  /// This stage's layers, in order.
  std::vector<nn::Module*> layers_;
  int64_t stage_ = 0;
  std::vector<autograd::Variable> parameters_;
  /// Tied parameters held by more than one stage, with the stages holding them (ascending).
  std::vector<std::pair<autograd::Variable, std::vector<int>>> tied_;
  std::vector<PipelineAction> actions_;
  size_t activation_slots_ = 0;
  std::vector<PendingSend> pending_;
  bool replica_reducers_made_ = false;
  Tensor loss_sum_;          // the last stage's micro-batch losses, summed in f64 where they are (read once)
  double loss_scale_ = 1.0;  // this step's (trainStep)
  PipelineStepTimes times_;
  /// The default generator's counters one micro-batch draws across all stages (dropout,
  /// attention's dropout), as one process draws them; each chunk's start among them is its
  /// draws_before. Learnt on the first step (countDraws).
  std::optional<uint64_t> draws_;
  /// Whether replicas draw their part of one process's dropout masks (one_process_dropout with a
  /// data group of several ranks).
  bool sharesBatchDraws() const;
  void countDraws(const Tensor& first_input);
};

}  // namespace lockstep::parallel
