#pragma once
// The training engine: how a job trains a step, in one place (DeepSpeed's engine, Accelerate's
// Accelerator). `lockstep train`, prepare() and the examples all train through it.
//
// Built from the worker environment and one options struct, it wraps the model for data
// parallelism (DistributedDataParallel when the world has several ranks), chooses the training
// sampler, makes the optimizer and LR scheduler through optim's registry, and runs a step as
// explicit phases:
//   micro-steps     forward(), backward(): all but the last of gradient_accumulation_steps
//                   micro-steps run under DDP's no_sync (gradients accumulate locally)
//   gradient phase  with a loss scaler: unscale, and agree across ranks whether any gradient holds
//                   an inf or nan (then the step is skipped on every rank alike); then clipping to
//                   gradient_clipping
//   update phase    optimizer step, LR schedule, gradients cleared
// With zero_stage 1, 2 or 3 the optimizer is a ZeroOptimizer's (zero/optimizer.h): each rank steps
// its partition and all-gathers the parameters; with stage 2 the gradients are reduce-scattered
// in buckets during backward (no DDP wrapper), every micro-step, and the gradient phase's overflow
// check and clipping norm are joined across the partitions. With stage 3 the parameters are
// partitioned too: forward() all-gathers them, backward() releases them when its pass is done.
//
//   parallel::Engine engine(model, {.optimizer = {"Adam", {{"lr", 1e-3}}}});
//   auto loader = engine.makeLoader(train_set, {.batch_size = 32, .seed = 1});
//   for (uint64_t e = 0; e < epochs; ++e) {
//     loader->setEpoch(e);
//     for (data::Batch& b : *loader) {
//       engine.backward(criterion(engine.forward(Variable(b.input)), b.target));
//       engine.step();  // every micro-step; steps the optimizer at the accumulation boundary
//     }
//   }
//
// Not thread-safe. The constructor is collective when the world has several ranks, and so is
// every backward() at an accumulation boundary (DDP's allreduce; with ZeRO stage 2 every
// backward(), the reduce-scatter), and, with a loss scaler, with ZeRO or with clipping at stage 2,
// every step() at an accumulation boundary (the overflow flag, the parameters' all-gather, the
// norm).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/data/data_loader.h"
#include "lockstep/optim/loss_scaler.h"
#include "lockstep/optim/registry.h"
#include "lockstep/parallel/ddp/distributed_data_parallel.h"
#include "lockstep/parallel/environment.h"
#include "lockstep/parallel/memory_report.h"
#include "lockstep/parallel/precision.h"
#include "lockstep/parallel/zero/optimizer.h"

namespace lockstep::parallel {

struct EngineOptions {
  /// Optimizer and scheduler by name (optim/registry.h); unused when the engine is given an
  /// optimizer.
  optim::OptimizerSpec optimizer{};
  optim::SchedulerSpec scheduler{};
  /// Optimizer steps of the whole run, for schedules that need it (WarmupDecayLR); 0: unknown.
  int64_t total_steps = 0;
  /// Micro-steps (forward + backward) per optimizer step; the loss of each is scaled by 1/this,
  /// so the step sees the mean gradient over all of them.
  int64_t gradient_accumulation_steps = 1;
  /// Clip the gradients' joint 2-norm to this before each optimizer step; 0: off.
  double gradient_clipping = 0.0;
  /// Loss scaling (DeepSpeed's "fp16" loss-scale keys, optim/loss_scaler.h): backward() scales the
  /// loss, the gradient phase unscales the gradients and skips the step on every rank when any
  /// rank's hold an inf or nan. Unset: no scaling and no checks (no extra pass over the gradients).
  /// Its fp16_optimizer is set from zero_stage (DeepSpeed's FP16_Optimizer rules without ZeRO).
  std::optional<optim::LossScalerOptions> loss_scaler{};
  /// Skip a step whose gradients hold an inf or nan on any rank (every rank skips it: the gradients
  /// dropped, neither the optimizer nor the schedule stepped), without a loss scaler: DeepSpeed's
  /// bf16.check_grad_overflow at ZeRO stages 1 and 2. One extra read of the gradients a step (on a
  /// GPU one device flag read back).
  bool skip_nonfinite_steps = false;
  /// DistributedDataParallel's options, used when the world has several ranks.
  DistributedDataParallelOptions ddp{};
  /// Process-group backend when the engine reads the environment itself.
  std::string backend = "auto";
  /// Its collective timeout when the engine reads the environment itself (0: LOCKSTEP_TIMEOUT,
  /// else comm::kDefaultCollectiveTimeout).
  std::chrono::milliseconds timeout = comm::kGroupTimeout;
  /// fp32, or mixed precision: bf16 or fp16 run forward() under autocast in that dtype
  /// (autograd/autocast.h; parameters, gradients and optimizer state stay f32) and return its
  /// output in f32. fp16 scales the loss: with loss_scaler when set, else dynamically with
  /// LossScalerOptions' defaults (DeepSpeed's). bf16 takes no loss scaler (a ValueError).
  Precision precision = Precision::fp32;
  /// With bf16/fp16: cast the floating input of forward() to that dtype first (DeepSpeed's
  /// fp16.auto_cast). Off: the input stays as given and the first lower-precision op casts it.
  bool auto_cast = false;
  /// With bf16/fp16, DeepSpeed's bf16 and fp16 sections: DeepSpeed casts the module to the 16-bit
  /// dtype before its optimizer takes the f32 master weights from it, so the run starts from the
  /// initial parameters rounded to that dtype, at every ZeRO stage (stage 0 here, stages 1-3
  /// through ZeroOptions::initial_rounding). The trainer sets it for those sections. Off:
  /// torch.autocast's start, the f32 parameters as given (DeepSpeed's torch_autocast).
  bool round_initial_parameters = false;
  /// 0: replicated optimizer state (DDP). 1: ZeRO stage 1, optimizer states partitioned across
  /// ranks (gradients still averaged by DDP). 2: ZeRO stage 2, gradients reduce-scattered into
  /// each rank's partition too (no DDP wrapper). 3: ZeRO stage 3, parameters partitioned too: each
  /// rank keeps its partition of them; forward() all-gathers the whole parameters and backward()
  /// releases them after the backward pass (Engine::gatheredParameters() brings them back whole;
  /// Engine::evaluate() runs forwards without a backward as training does).
  int zero_stage = 0;
  /// The ZeRO optimizer's options when zero_stage > 0 (its `stage` is taken from zero_stage).
  ZeroOptions zero{};
};

/// ValueError naming the field when an option is out of range or not implemented yet. Pure.
void validateEngineOptions(const EngineOptions& options);

/// The training sampler of this rank: DistributedSampler over the world when it has several ranks
/// (seed shared, shuffle per epoch), else RandomSampler(seed) or SequentialSampler. Pure.
std::shared_ptr<data::Sampler> makeTrainSampler(const DistributedEnvironment& env, int64_t dataset_size,
                                                bool shuffle, uint64_t seed, bool drop_last = false);

/// The model's parameters held whole while it lives (ZeRO stage 3; a no-op otherwise), from
/// Engine::gatheredParameters(). Creating it is collective, and so is its end, which returns each
/// rank to its partition alone. Not thread-safe.
class GatheredParameters {
 public:
  explicit GatheredParameters(ZeroOptimizer* zero);
  ~GatheredParameters();
  GatheredParameters(GatheredParameters&& other) noexcept;
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;
  GatheredParameters& operator=(GatheredParameters&&) = delete;

  /// Not collective. The whole values were changed (a checkpoint loaded into the model): each rank
  /// copies its elements of them into its partition, the values that train on.
  void adoptChanges();

 private:
  ZeroOptimizer* zero_;  // null: nothing to gather or release
};

class Engine {
 public:
  /// Builds the model an engine with `options` will train on `device`: `build()` moved to device,
  /// except that ZeRO stage 3 on the host runs it under zero.Init (zero/init.h, as DeepSpeed's
  /// Hugging Face integration does), so the whole model is never in memory: its parameters go to a
  /// scratch file in the offload's NVMe directory (else $TMPDIR) as they are made, and each rank
  /// takes its partition one bucket at a time when the engine is built. So does stage 3 with
  /// options.zero.gather_device (offload_param cpu on a GPU), and the model stays on the host: the
  /// engine takes each rank's partition into host memory and gathers layers on the GPU, so the
  /// whole model is never on the GPU either.
  static std::shared_ptr<nn::Module> buildModel(const EngineOptions& options, Device device,
                                                const std::function<std::shared_ptr<nn::Module>()>& build);

  /// Reads the environment (initFromEnvironment(options.backend, options.timeout)); collective when
  /// distributed.
  Engine(std::shared_ptr<nn::Module> model, const EngineOptions& options);
  /// On an environment already joined (several engines on one group, tests).
  Engine(std::shared_ptr<nn::Module> model, const EngineOptions& options, DistributedEnvironment env);
  /// With the caller's optimizer over model->parameters() instead of options.optimizer.
  Engine(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer,
         const EngineOptions& options, DistributedEnvironment env);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const DistributedEnvironment& environment() const { return env_; }
  /// What forward() runs: the DDP wrapper on several ranks, else the model itself.
  const std::shared_ptr<nn::Module>& module() const { return wrapped_; }
  /// The model as built (state dicts, saving: no "module." prefix).
  const std::shared_ptr<nn::Module>& model() const { return model_; }
  /// The DDP wrapper, or nullptr on one rank and with ZeRO stage 2.
  DistributedDataParallel* ddp() const { return ddp_.get(); }
  /// The ZeRO optimizer when zero_stage > 0, else nullptr. optimizer() is then the optimizer it
  /// took over (its groups hold this rank's shards of the parameters). Partitioned checkpoints
  /// need it; training code uses the calls below instead.
  ZeroOptimizer* zero() const { return zero_.get(); }

  /// Collective. The parameters whole until the result goes (ZeRO stage 3: all-gathered, for a
  /// checkpoint to load into, a state dict or generation); no-op otherwise.
  [[nodiscard]] GatheredParameters gatheredParameters() { return GatheredParameters(zero_.get()); }
  /// Whether every parameter of the model is whole now (always, below stage 3).
  bool parametersWhole() const { return !zero_ || zero_->parametersGathered(); }
  /// Runs `forwards` (forward passes with no backward: an evaluation) as training runs its own:
  /// ZeRO stage 3 gathers each layer's parameters for its forward alone and releases them after
  /// (collective); parameters held whole (gatheredParameters()) stay so. Other stages: runs it.
  /// With ZeRO's master weights (16-bit parameters) it runs under autocast in their dtype.
  void evaluate(const std::function<void()>& forwards);
  /// Collective at stages 2 and 3 with ddp.broadcast_buffers (the default) on several ranks: rank
  /// 0's buffers (BatchNorm's running statistics) to every rank, as their training forwards
  /// take them. Called before an evaluation every rank runs, so that each evaluates the model
  /// rank 0 saves (each rank's own statistics, updated by its last forward, describe no saved
  /// model). Nothing otherwise (DDP's stages 0 and 1 keep the ranks' buffers alike themselves).
  void syncBuffersForEvaluation();
  /// Collective at ZeRO stage 3 (parameters not gathered, outside a step): calls fn with whole
  /// parameters of the model, one gathered bucket after another, until each was passed once; the
  /// whole model is never in memory (a model file written as it streams by). Otherwise: once, with
  /// every trained parameter.
  void forEachWholeParameterBucket(const std::function<void(const std::vector<autograd::Variable>&)>& fn);
  /// This rank's bytes of parameters, gradients and optimizer states (the memory report).
  ModelStateBytes memory() const;
  const std::shared_ptr<optim::Optimizer>& optimizer() const { return optimizer_; }
  /// nullptr when options.scheduler names none.
  optim::LRScheduler* scheduler() const { return scheduler_.get(); }
  const EngineOptions& options() const { return options_; }

  /// A loader over this rank's share of `dataset` (makeTrainSampler with options.shuffle and
  /// options.seed; options.batch_size is per rank).
  std::shared_ptr<data::DataLoader> makeLoader(std::shared_ptr<data::Dataset> dataset,
                                               const data::DataLoaderOptions& options) const;

  /// Micro-step, part 1: runs the (wrapped) model. Before the last micro-step of an accumulation
  /// window, DDP's synchronisation is off until backward() returns.
  autograd::Variable forward(const autograd::Variable& input);
  /// forward(input), then loss(output): with bf16/fp16 the loss runs under the same autocast scope
  /// on the output as the model computed it, not widened to f32 first (nanoGPT computes its loss so).
  /// A loss of autocast's f32 policy (cross entropy, NLL, MSE) gives the values it gives on the
  /// widened output, and cross entropy reads bf16/f16 logits in place (kernels' f32_loss): no f32
  /// copy of a language model's logits, nor the cast of their gradient back.
  autograd::Variable forwardLoss(const autograd::Variable& input,
                                 const std::function<autograd::Variable(const autograd::Variable&)>& loss);
  /// forwardLoss for a model that computes its loss itself: `run` calls the (unwrapped) model its
  /// own way and returns the loss, e.g. a language model's forwardLoss, whose output layer and cross
  /// entropy are one op. Everything forward() does around the model is done around `run` (DDP's
  /// forward and its reducer armed for the loss, the no_sync window, ZeRO-3's gathers), under the
  /// autocast scope; the input is `run`'s business (autocast's cast of an f32 input is not applied).
  autograd::Variable forwardWith(const std::function<autograd::Variable()>& run);
  /// Micro-step, part 2: backward of loss * lossScale() / gradient_accumulation_steps.
  void backward(autograd::Variable loss);
  /// Ends a micro-step. At the accumulation boundary runs the gradient phase and the update phase,
  /// advances globalSteps() and returns true; otherwise returns false and changes nothing. A step
  /// that the loss scaler skips for an overflow still returns true and counts in globalSteps(),
  /// as DeepSpeed's global_steps does (wasStepApplied() tells the two apart). Collective at the
  /// boundary when a loss scaler is set and the world has several ranks.
  bool step();

  /// Drops the gradients of an unfinished accumulation window (fewer micro-steps than
  /// gradient_accumulation_steps, e.g. at the end of an epoch) and starts a new window.
  void discardPartialAccumulation();

  /// True when the next backward() completes an optimizer step's gradients.
  bool isGradientAccumulationBoundary() const { return micro_ + 1 == options_.gradient_accumulation_steps; }
  /// Optimizer steps taken (counting from a resumed checkpoint's, see setGlobalSteps).
  int64_t globalSteps() const { return global_steps_; }
  /// A step that ran as a replay of a captured one (StepGraph): counted as an applied step.
  void countReplayedStep() {
    ++global_steps_;
    step_applied_ = true;
  }
  /// After restoring a checkpoint: the optimizer steps it had taken.
  void setGlobalSteps(int64_t steps) { global_steps_ = steps; }

  /// What a step changes on the host, apart from tensors' values: the engine's counters, the
  /// gradients each parameter holds (the tensors, not copies), the optimizer's hyper-parameters and
  /// step counts (Optimizer::HostState) and the schedule's counter. StepGraph saves it before it
  /// captures a step and puts it back when the capture fails: the captured step's device work never
  /// ran, so the step can then run eagerly with the result it would have had. Not for a step that
  /// ran (its parameters and states changed on the device).
  struct HostStepState {
    int64_t micro = 0, global_steps = 0, skipped_nonfinite = 0;
    bool step_applied = false;
    Tensor last_grad_norm;
    std::vector<Tensor> grads;  // params_'s, undefined where none
    optim::Optimizer::HostState optimizer;
    std::optional<optim::HyperParams> scheduler;
  };
  HostStepState hostStepState() const;
  void restoreHostStepState(const HostStepState& saved);
  /// The gradients' joint 2-norm before the last clipping (0 when clipping is off; unchanged by a
  /// skipped step, which clips nothing). On a GPU the step leaves it on the device and this reads
  /// it back (waiting for the step's work): call it when logging, not every step.
  double lastGradNorm() const { return last_grad_norm_.defined() ? last_grad_norm_.item<double>() : 0.0; }

  /// Whether the last step() changed the parameters (DeepSpeed's was_step_applied): false after a
  /// micro-step inside an accumulation window and after a step skipped for an overflow.
  bool wasStepApplied() const { return step_applied_; }
  /// Optimizer steps skipped for an overflow (DeepSpeed's skipped_steps): the loss scaler's
  /// overflows(), restored with its state dict, plus the steps skip_nonfinite_steps dropped since
  /// this engine was made (not kept in checkpoints).
  int64_t skippedSteps() const { return (scaler_ ? scaler_->overflows() : 0) + skipped_nonfinite_; }
  /// What backward() multiplies the loss by: the loss scaler's scale, 1 without one.
  double lossScale() const { return scaler_ ? scaler_->scale() : 1.0; }
  /// The loss scaler (its stateDict() belongs in a checkpoint), or nullptr when
  /// options.loss_scaler is unset.
  optim::LossScaler* lossScaler() const { return scaler_.get(); }

 private:
  /// forward() without widening the output (under autocast, in the autocast dtype).
  autograd::Variable forwardAsComputed(const autograd::Variable& input);
  /// False when the loss scaler found an inf or nan on some rank: the gradients are then cleared
  /// and the update phase must not run.
  bool gradientPhase();
  void updatePhase();
  /// The optimizer's zeroGrad, or the ZeRO optimizer's (which also clears the partitions).
  void clearGradients();
  /// Unscales every gradient and agrees with the other ranks whether any holds an inf or nan.
  bool unscaleAndCheckOverflow();
  // Multiplies every gradient by `factor` (1: only reads them) and says whether any rank's hold an
  // inf or nan (every rank gets the same answer).
  bool scaleAndCheckOverflow(double factor);

  EngineOptions options_;
  DistributedEnvironment env_;
  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<DistributedDataParallel> ddp_;
  std::shared_ptr<nn::Module> wrapped_;
  std::vector<autograd::Variable> params_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<ZeroOptimizer> zero_;
  std::unique_ptr<optim::LRScheduler> scheduler_;
  std::unique_ptr<DistributedDataParallel::NoSyncGuard> no_sync_;
  std::unique_ptr<optim::LossScaler> scaler_;
  /// Whether clipping and the loss scaler work on the ZeRO optimizer's partition (stages 2-3,
  /// and any stage with master weights: its f32 copies of the gradients) rather than on the
  /// parameters' gradients.
  bool shardedGradients() const { return zero_ && (zero_->stage() >= 2 || zero_->masterWeights()); }
  std::optional<DType> autocast_dtype_;
  int64_t micro_ = 0;  // micro-steps done in the current accumulation window
  int64_t global_steps_ = 0;
  Tensor last_grad_norm_;         // 0-d f64 where the gradients are; undefined until clipping runs
  double step_grad_scale_ = 1.0;  // the clipping coefficient the fused host step applies
  bool step_applied_ = false;
  int64_t skipped_nonfinite_ = 0;  // steps skip_nonfinite_steps dropped
};

}  // namespace lockstep::parallel
