#include "lockstep/parallel/engine.h"

#include <cmath>

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/ops/math.h"
#include "lockstep/data/samplers/distributed_sampler.h"
#include "lockstep/data/samplers/random_sampler.h"
#include "lockstep/data/samplers/sequential_sampler.h"
#include "lockstep/kernels/finite.h"
#include "lockstep/optim/clip_grad.h"
#include "lockstep/parallel/model_sync.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/parallel/zero/init.h"
#include "lockstep/util/error.h"

namespace lockstep::parallel {

void validateEngineOptions(const EngineOptions& o) {
  LOCKSTEP_ENFORCE(o.gradient_accumulation_steps >= 1, ValueError,
                   "gradient_accumulation_steps=", o.gradient_accumulation_steps, " must be at least 1");
  LOCKSTEP_ENFORCE(
      o.gradient_clipping >= 0.0 && o.gradient_clipping < std::numeric_limits<double>::infinity(), ValueError,
      "gradient_clipping=", o.gradient_clipping, " must be a finite number >= 0 (0 turns clipping off)");
  LOCKSTEP_ENFORCE(o.total_steps >= 0, ValueError, "total_steps=", o.total_steps, " must be >= 0");
  LOCKSTEP_ENFORCE(!(o.precision == Precision::bf16 && o.loss_scaler), ValueError,
                   "precision bf16 with loss scaling: bf16 has f32's exponent range and needs no loss scale "
                   "(DeepSpeed's bf16 has none either); drop the loss scaler or use fp16");
  LOCKSTEP_ENFORCE(o.zero_stage >= 0 && o.zero_stage <= 3, ValueError, "ZeRO stage ", o.zero_stage,
                   " does not exist; use 0 (DDP), 1, 2 or 3");
  if (o.zero_stage > 0) {
    ZeroOptions z = o.zero;
    z.stage = o.zero_stage;
    validateZeroOptions(z);
  }
  if (o.zero.param_dtype) {
    LOCKSTEP_ENFORCE(o.zero_stage > 0 && precisionDType(o.precision) == o.zero.param_dtype, ValueError,
                     "ZeroOptions::param_dtype ", dtypeName(*o.zero.param_dtype),
                     " (parameters with f32 master weights) needs ZeRO stage 1-3 and precision ",
                     *o.zero.param_dtype == DType::bf16 ? "bf16" : "fp16", "; this engine has stage ",
                     o.zero_stage, " and precision ", precisionName(o.precision));
  }
  if (o.zero_stage >= 2) {
    // Stage 2 reduces gradients itself, without DDP: DDP's gradient options would do nothing.
    const DistributedDataParallelOptions d;
    const char* what = o.ddp.find_unused_parameters                 ? "find_unused_parameters"
                       : o.ddp.gradient_as_bucket_view              ? "gradient_as_bucket_view"
                       : o.ddp.comm_hook != d.comm_hook             ? "comm_hook"
                       : o.ddp.bucket_cap_mb != d.bucket_cap_mb     ? "bucket_cap_mb"
                       : o.ddp.first_bucket_mb != d.first_bucket_mb ? "first_bucket_mb"
                                                                    : nullptr;
    LOCKSTEP_ENFORCE(
        what == nullptr, ValueError, "ddp.", what ? what : "",
        " does not apply to ZeRO stages 2 and 3, which reduce-scatter gradients without DDP (its bucket "
        "size is zero_optimization.reduce_bucket_size); leave it at its default or use stage 0 or 1");
  }
  if (o.loss_scaler) optim::validateLossScalerOptions(*o.loss_scaler);
}

std::shared_ptr<data::Sampler> makeTrainSampler(const DistributedEnvironment& env, int64_t n, bool shuffle,
                                                uint64_t seed, bool drop_last) {
  if (env.group) {
    data::DistributedSamplerOptions so;
    so.num_replicas = env.worldSize();
    so.rank = env.rank();
    so.shuffle = shuffle;
    so.seed = seed;
    so.drop_last = drop_last;
    return std::make_shared<data::DistributedSampler>(n, so);
  }
  if (shuffle) return std::make_shared<data::RandomSampler>(n, seed);
  return std::make_shared<data::SequentialSampler>(n);
}

GatheredParameters::GatheredParameters(ZeroOptimizer* zero) : zero_(zero) {
  if (zero_) zero_->gatherParameters();
}

GatheredParameters::~GatheredParameters() {
  if (zero_) zero_->releaseParameters();
}

GatheredParameters::GatheredParameters(GatheredParameters&& other) noexcept : zero_(other.zero_) {
  other.zero_ = nullptr;
}

void GatheredParameters::adoptChanges() {
  if (zero_) zero_->adoptGatheredParameters();
}

std::shared_ptr<nn::Module> Engine::buildModel(const EngineOptions& options, Device device,
                                               const std::function<std::shared_ptr<nn::Module>()>& build) {
  std::optional<ZeroInit> zero_init;
  const bool from_host = options.zero_stage == 3 && options.zero.gather_device.has_value();
  if (options.zero_stage == 3 && (device.isCpu() || from_host)) {
    const ZeroOptions& z = options.zero;
    zero_init.emplace(!z.offload_param_nvme_path.empty() ? z.offload_param_nvme_path
                                                         : z.offload_optimizer.nvme_path);
  }
  std::shared_ptr<nn::Module> model = build();
  if (!from_host) model->to(device);
  return model;
}

Engine::Engine(std::shared_ptr<nn::Module> model, const EngineOptions& options)
    : Engine(std::move(model), options, initFromEnvironment(options.backend, options.timeout)) {}

Engine::Engine(std::shared_ptr<nn::Module> model, const EngineOptions& options, DistributedEnvironment env)
    : Engine(model, nullptr, options, std::move(env)) {}

Engine::Engine(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer,
               const EngineOptions& options, DistributedEnvironment env)
    : options_(options), env_(std::move(env)), model_(std::move(model)) {
  LOCKSTEP_ENFORCE(model_ != nullptr, ValueError, "Engine: a model is required");
  validateEngineOptions(options_);
  // ZeRO on a GPU: the partition in GPU memory (or, offloaded, on the host). NVMe offload there
  // takes ZeRO-Infinity's configuration, whose pieces are host memory while in use.
  const ZeroOptions& z = options_.zero;
  const Device compute = z.gather_device.value_or(model_->device());
  LOCKSTEP_ENFORCE(options_.zero_stage == 0 || compute.isCpu() ||
                       (z.offload_optimizer.nvme_path.empty() && z.offload_param_nvme_path.empty()) ||
                       (options_.zero_stage == 3 && !z.offload_param_nvme_path.empty()),
                   NotSupportedError, "zero_optimization's NVMe offload on ", deviceName(compute),
                   " takes ZeRO-Infinity's configuration: stage 3 with offload_param and offload_optimizer "
                   "both on nvme; use that, offload_optimizer device cpu, or train on device cpu");
  params_ = model_->parameters();
  optimizer_ = optimizer ? std::move(optimizer) : optim::makeOptimizer(options_.optimizer, params_);
  if (options_.round_initial_parameters) {
    if (const std::optional<DType> dt = precisionDType(options_.precision)) {
      if (options_.zero_stage > 0) {
        options_.zero.initial_rounding = dt;  // stage 3's parameters may exist only as its pieces
      } else {
        roundInPlace(params_, *dt);
      }
    }
  }
  if (options_.zero_stage > 0) {
    // Stage 1 keeps DDP's allreduce of the gradients; stages 2 and 3 reduce-scatter them
    // themselves and check and broadcast the model as DDP would. Made before DDP: with master
    // weights it rounds the parameters, whose dtype DDP's buckets take.
    ZeroOptions z = options_.zero;
    z.stage = options_.zero_stage;
    zero_ = std::make_unique<ZeroOptimizer>(model_, optimizer_, env_.group, z);
  }
  if (env_.group && options_.zero_stage < 2) {
    ddp_ = std::make_shared<DistributedDataParallel>(model_, env_.group, options_.ddp);
    wrapped_ = ddp_;
  } else {
    wrapped_ = model_;
  }
  if (!options_.scheduler.type.empty()) {
    scheduler_ = optim::makeScheduler(options_.scheduler, *optimizer_, options_.total_steps);
  }
  autocast_dtype_ = precisionDType(options_.precision);
  // fp16 without a scaler would underflow small gradients to zero: DeepSpeed's fp16 section
  // scales dynamically unless told otherwise, and so does the engine.
  if (options_.precision == Precision::fp16 && !options_.loss_scaler)
    options_.loss_scaler = optim::LossScalerOptions{};
  if (options_.loss_scaler) {
    // Without ZeRO DeepSpeed's engine scales with FP16_Optimizer's rules (no hysteresis), with it
    // with DynamicLossScaler's.
    options_.loss_scaler->fp16_optimizer = options_.zero_stage == 0;
    scaler_ = std::make_unique<optim::LossScaler>(*options_.loss_scaler);
  }
}

Engine::~Engine() = default;

std::shared_ptr<data::DataLoader> Engine::makeLoader(std::shared_ptr<data::Dataset> dataset,
                                                     const data::DataLoaderOptions& options) const {
  LOCKSTEP_ENFORCE(dataset != nullptr, ValueError, "Engine::makeLoader: a dataset is required");
  auto sampler = makeTrainSampler(env_, dataset->size(), options.shuffle, options.seed, options.drop_last);
  data::DataLoaderOptions lo = options;
  lo.shuffle = false;  // the sampler decides the order
  return std::make_shared<data::DataLoader>(std::move(dataset), std::move(sampler), lo);
}

autograd::Variable Engine::forward(const autograd::Variable& input) {
  autograd::Variable out = forwardAsComputed(input);
  // The caller's loss then sees f32, as in Accelerate's convert_outputs_to_fp32: a criterion
  // computed outside an autocast scope stays in f32 (softmax and losses need the range).
  return autocast_dtype_ ? autograd::toDType(out, DType::f32) : out;
}

autograd::Variable Engine::forwardLoss(
    const autograd::Variable& input,
    const std::function<autograd::Variable(const autograd::Variable&)>& loss) {
  if (!autocast_dtype_) return loss(forward(input));
  autograd::Variable out = forwardAsComputed(input);
  autograd::AutocastGuard autocast(*autocast_dtype_);
  return loss(out);
}

autograd::Variable Engine::forwardAsComputed(const autograd::Variable& input) {
  return forwardWith([&] {
    const bool cast = autocast_dtype_ && options_.auto_cast && input.dtype() == DType::f32;
    return model_->forward(cast ? autograd::toDType(input, *autocast_dtype_) : input);
  });
}

autograd::Variable Engine::forwardWith(const std::function<autograd::Variable()>& run) {
  // Accumulation micro-steps reduce nothing; the last one reduces the sum (DDP no_sync).
  if (ddp_ && !isGradientAccumulationBoundary() && !no_sync_) no_sync_ = ddp_->noSync();
  // Without the DDP wrapper (stage 2), its per-forward broadcast of rank 0's buffers.
  if (!ddp_ && env_.group && options_.ddp.broadcast_buffers && model_->isTraining())
    broadcastBuffers(*model_, *env_.group);
  // Stage 3: the root's parameters for this forward and its backward (the layers gather theirs).
  if (zero_) zero_->beginStep();
  std::optional<autograd::AutocastGuard> autocast;
  if (autocast_dtype_) autocast.emplace(*autocast_dtype_);
  return ddp_ ? ddp_->forwardWith(run) : run();
}

void Engine::backward(autograd::Variable loss) {
  const int64_t accum = options_.gradient_accumulation_steps;
  if (scaler_) {
    // One multiplication: scale / accum is exact in double for a power-of-two scale.
    loss = loss * (scaler_->scale() / static_cast<double>(accum));
  } else if (accum > 1) {
    loss = loss * (1.0 / static_cast<double>(accum));
  }
  loss.backward();
  no_sync_.reset();
  // Stage 3: back to the partition alone (the graph freed what it had saved).
  if (zero_) zero_->releaseParameters();
}

bool Engine::step() {
  step_applied_ = false;
  if (++micro_ < options_.gradient_accumulation_steps) return false;
  micro_ = 0;
  if (gradientPhase()) {
    updatePhase();
    step_applied_ = true;
  }
  ++global_steps_;
  return true;
}

Engine::HostStepState Engine::hostStepState() const {
  HostStepState h;
  h.micro = micro_;
  h.global_steps = global_steps_;
  h.skipped_nonfinite = skipped_nonfinite_;
  h.step_applied = step_applied_;
  h.last_grad_norm = last_grad_norm_;
  for (const autograd::Variable& p : params_) h.grads.push_back(p.hasGrad() ? p.grad() : Tensor());
  h.optimizer = optimizer_->hostState();
  if (scheduler_) h.scheduler = scheduler_->stateDict();
  return h;
}

void Engine::restoreHostStepState(const HostStepState& saved) {
  LOCKSTEP_CHECK(saved.grads.size() == params_.size(), "Engine::restoreHostStepState: the parameters changed",
                 saved.grads.size(), params_.size());
  micro_ = saved.micro;
  global_steps_ = saved.global_steps;
  skipped_nonfinite_ = saved.skipped_nonfinite;
  step_applied_ = saved.step_applied;
  last_grad_norm_ = saved.last_grad_norm;
  for (size_t i = 0; i < params_.size(); ++i) params_[i].setGrad(saved.grads[i]);
  optimizer_->restoreHostState(saved.optimizer);
  if (scheduler_ && saved.scheduler) scheduler_->loadStateDict(*saved.scheduler);
}

void Engine::evaluate(const std::function<void()>& forwards) {
  // 16-bit parameters (ZeRO's with param_dtype) meet f32 inputs under autocast, as in training.
  std::optional<autograd::AutocastGuard> autocast;
  if (zero_ && zero_->lowPrecisionParameters()) autocast.emplace(*autocast_dtype_);
  const bool by_layer = zero_ && !zero_->parametersGathered();  // whole parameters stay as they are
  if (!by_layer) return forwards();
  zero_->beginStep();
  try {
    forwards();
  } catch (...) {  // an evaluation that fails leaves no layer gathered behind it
    zero_->releaseParameters();
    throw;
  }
  zero_->releaseParameters();
}

void Engine::syncBuffersForEvaluation() {
  if (!ddp_ && env_.group && options_.ddp.broadcast_buffers) broadcastBuffers(*model_, *env_.group);
}

void Engine::forEachWholeParameterBucket(
    const std::function<void(const std::vector<autograd::Variable>&)>& fn) {
  if (!zero_) {
    fn(params_);
    return;
  }
  const std::vector<autograd::Variable>& params = zero_->parameters();
  zero_->forEachParameterBucketWhole([&](const std::vector<size_t>& indices) {
    std::vector<autograd::Variable> bucket;
    bucket.reserve(indices.size());
    for (size_t i : indices) bucket.push_back(params[i]);
    fn(bucket);
  });
}

ModelStateBytes Engine::memory() const {
  return zero_ ? zero_->memory() : replicatedModelStateBytes(*optimizer_);
}

void Engine::clearGradients() {
  if (zero_) {
    zero_->zeroGrad();
  } else {
    optimizer_->zeroGrad();
  }
}

void Engine::discardPartialAccumulation() {
  if (micro_ == 0) return;
  clearGradients();
  micro_ = 0;
}

bool Engine::gradientPhase() {
  step_grad_scale_ = 1.0;
  if (scaler_) {
    const bool overflow = unscaleAndCheckOverflow();
    // DeepSpeed's order: the scale is updated in the optimizer's step, overflow or not; on an
    // overflow the gradients are dropped and neither the optimizer nor the schedule steps.
    if (overflow) clearGradients();
    scaler_->update(overflow);
    if (overflow) return false;
  }
  // ZeRO's fused host step (ZeroOptimizer::fusesHostStep): the clipping coefficient goes into the
  // update instead of a pass of its own, and bf16's check below is the norm's: a non-finite norm
  // is a non-finite gradient on some rank (f64 sums of f32 squares do not overflow). Bitwise the
  // separate passes' step.
  if (options_.gradient_clipping > 0 && shardedGradients() && zero_->fusesHostStep()) {
    const double total = zero_->gradNorm();
    if (options_.skip_nonfinite_steps && !std::isfinite(total)) {
      clearGradients();
      ++skipped_nonfinite_;
      return false;
    }
    last_grad_norm_ = Tensor::scalar(total, DType::f64);
    step_grad_scale_ = optim::clipCoefficient(total, options_.gradient_clipping);
    return true;
  }
  // bf16 at ZeRO stages 1 and 2 (DeepSpeed's check_grad_overflow): a step whose gradients hold an
  // inf or nan on any rank is skipped on every rank, its gradients dropped, the schedule not stepped.
  if (options_.skip_nonfinite_steps && scaleAndCheckOverflow(1.0)) {
    clearGradients();
    ++skipped_nonfinite_;
    return false;
  }
  // Stage 2 holds only its partition of the gradients: the norm is joined across ranks. Stage 1
  // and DDP hold every averaged gradient and clip them all alike on every rank; stage 1 with master
  // weights clips its partition's f32 copies as stage 2 does.
  // The norm stays where it was computed (on a GPU, nothing is read back): lastGradNorm() reads it.
  if (options_.gradient_clipping > 0)
    last_grad_norm_ = shardedGradients()
                          ? Tensor::scalar(zero_->clipGradNorm(options_.gradient_clipping), DType::f64)
                          : optim::clipGradNormTensor(params_, options_.gradient_clipping);
  return true;
}

bool Engine::unscaleAndCheckOverflow() {
  // Unscaling before the check costs nothing when the step is skipped (the gradients are dropped)
  // and saves a second pass when it is not. An inf or nan stays one after the multiplication.
  return scaleAndCheckOverflow(1.0 / scaler_->scale());
}

bool Engine::scaleAndCheckOverflow(double factor) {
  if (shardedGradients()) return zero_->unscaleAndCheckOverflow(factor);
  // On a GPU every gradient sets one device flag, read once (not a sync per gradient).
  bool overflow = false;
  Tensor found_inf;
  for (auto& p : params_) {
    if (!p.hasGrad()) continue;
    Tensor g = p.grad();
    if (g.isCuda()) {
      if (!found_inf.defined()) found_inf = Tensor::zeros({1}, DType::f32, g.device());
      kernels::scaleAndCheckNonFiniteInto(g, factor, found_inf);
    } else {
      overflow =
          (factor == 1.0 ? kernels::hasNonFinite(g) : kernels::scaleAndCheckNonFinite(g, factor)) || overflow;
    }
  }
  if (found_inf.defined()) overflow = found_inf.item<float>() != 0.0f || overflow;
  // Every rank must decide alike, or their parameters part: the max of the flags.
  if (env_.group) overflow = allreduceScalar(*env_.group, overflow ? 1.0 : 0.0, comm::ReduceOp::max) != 0.0;
  return overflow;
}

void Engine::updatePhase() {
  if (zero_) {
    zero_->step(step_grad_scale_);
  } else {
    optimizer_->step();
  }
  if (scheduler_) scheduler_->step();
  clearGradients();
}

}  // namespace lockstep::parallel
