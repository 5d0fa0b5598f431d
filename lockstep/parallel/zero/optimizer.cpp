#include "lockstep/parallel/zero/optimizer.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <set>
#include <unordered_map>

#include "lockstep/kernels/finite.h"
#include "lockstep/kernels/norm.h"
#include "lockstep/kernels/scale.h"
#include "lockstep/optim/clip_grad.h"
#include "lockstep/parallel/ddp/bucket_assignment.h"
#include "lockstep/parallel/model_sync.h"
#include "lockstep/parallel/precision.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/parallel/zero/parameter_coordinator.h"
#include "lockstep/tensor/allocator.h"
#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/allocator.h"
#endif
#include "lockstep/util/error.h"

namespace lockstep::parallel {

using autograd::Variable;

void validateZeroOptions(const ZeroOptions& o) {
  LOCKSTEP_ENFORCE(o.stage >= 1 && o.stage <= 3, ValueError, "zero_optimization.stage=", o.stage,
                   " is not supported: lockstep implements stages 1, 2 and 3 (stage 0 is plain data "
                   "parallelism)");
  LOCKSTEP_ENFORCE(o.reduce_bucket_size >= 1, ValueError,
                   "zero_optimization.reduce_bucket_size=", o.reduce_bucket_size,
                   " must be a positive number of elements");
  LOCKSTEP_ENFORCE(o.allgather_bucket_size >= 1, ValueError,
                   "zero_optimization.allgather_bucket_size=", o.allgather_bucket_size,
                   " must be a positive number of elements");
  for (const auto& [key, value] : {std::pair{"stage3_prefetch_bucket_size", o.prefetch_bucket_size},
                                   {"stage3_param_persistence_threshold", o.param_persistence_threshold},
                                   {"stage3_max_live_parameters", o.max_live_parameters},
                                   {"stage3_max_reuse_distance", o.max_reuse_distance}}) {
    LOCKSTEP_ENFORCE(value >= 0, ValueError, "zero_optimization.", key, "=", value,
                     " must be a non-negative number of elements");
  }
  validateNvmeOffloadOptions(o.offload_optimizer);
  LOCKSTEP_ENFORCE(o.offload_step_chunk >= 1, ValueError,
                   "ZeroOptions::offload_step_chunk=", o.offload_step_chunk,
                   " must be a positive number of elements");
  LOCKSTEP_ENFORCE(
      !o.gather_device || o.stage == 3, ValueError,
      "ZeroOptions::gather_device (a model built on the host, gathered on a device) needs stage 3");
  if (o.offload_param_cpu) {
    LOCKSTEP_ENFORCE(o.stage == 3, ValueError,
                     "zero_optimization.offload_param: offloading parameters needs ZeRO stage 3 (DeepSpeed's "
                     "rule); set zero_optimization.stage: 3");
    LOCKSTEP_ENFORCE(o.offload_optimizer_cpu && o.offload_optimizer.nvme_path.empty(), ValueError,
                     "zero_optimization.offload_param.device cpu needs offload_optimizer.device cpu too: the "
                     "host pieces are the values the optimizer steps, so it steps them on the host "
                     "(ZeRO-Offload's configuration); set offload_optimizer: {device: cpu}");
    LOCKSTEP_ENFORCE(o.offload_param_nvme_path.empty(), ValueError,
                     "zero_optimization.offload_param: device cpu and an nvme_path at once");
  }
  LOCKSTEP_ENFORCE(
      !o.master_weights_in_param_dtype || o.param_dtype, ValueError,
      "ZeroOptions::master_weights_in_param_dtype needs param_dtype (the dtype of the parameters "
      "that are their own master weights)");
  if (o.param_dtype) {
    LOCKSTEP_ENFORCE(*o.param_dtype == DType::bf16 || *o.param_dtype == DType::f16, ValueError,
                     "ZeroOptions::param_dtype ", dtypeName(*o.param_dtype),
                     ": the parameters of mixed precision with f32 master weights are bf16 or f16");
    LOCKSTEP_ENFORCE(o.offload_optimizer.nvme_path.empty() && o.offload_param_nvme_path.empty(), ValueError,
                     "ZeroOptions::param_dtype (bf16 / fp16 parameters with f32 master weights) does not "
                     "combine with NVMe offload: the swap files hold the parameters' own dtype; leave "
                     "param_dtype unset (f32 parameters under autocast) with offload to nvme");
  }
  if (!o.offload_param_nvme_path.empty()) {
    LOCKSTEP_ENFORCE(o.stage == 3, ValueError,
                     "zero_optimization.offload_param: offloading parameters needs ZeRO stage 3 (DeepSpeed's "
                     "rule); set zero_optimization.stage: 3");
    LOCKSTEP_ENFORCE(
        !o.offload_optimizer.nvme_path.empty(), ValueError,
        "zero_optimization.offload_param.device nvme needs offload_optimizer.device nvme too: the "
        "swapped parameter pieces are stepped sub-group by sub-group with their optimizer states "
        "(ZeRO-Infinity's configuration); set offload_optimizer {device: nvme, nvme_path: ...}");
    LOCKSTEP_ENFORCE(o.offload_param_buffer_size >= 1, ValueError,
                     "zero_optimization.offload_param.buffer_size=", o.offload_param_buffer_size,
                     " must be a positive number of elements");
  }
}

ZeroOptimizer::ZeroOptimizer(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer,
                             std::shared_ptr<comm::ProcessGroup> group, const ZeroOptions& options)
    : model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      group_(std::move(group)),
      options_(options) {
  LOCKSTEP_ENFORCE(model_ != nullptr && optimizer_ != nullptr, ValueError,
                   "ZeroOptimizer needs a model and an optimizer");
  validateZeroOptions(options_);
  if (group_) {
    rank_ = group_->rank();
    world_ = group_->size();
  }
  LOCKSTEP_ENFORCE(
      optimizer_->stateDict().state.empty(), ValueError,
      "ZeroOptimizer: the optimizer has already stepped (it holds state); build the ZeRO optimizer "
      "before the first step");
  std::unordered_map<const autograd::VariableImpl*, std::string> name_of;
  for (auto& [name, p] : model_->namedParameters()) name_of.emplace(p.impl().get(), name);
  std::vector<size_t> group_of;
  auto& groups = optimizer_->paramGroups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Variable& p : groups[g].params) {
      auto it = name_of.find(p.impl().get());
      LOCKSTEP_ENFORCE(it != name_of.end(), ValueError,
                       "ZeroOptimizer: the optimizer holds a parameter that is not the model's (group ", g,
                       ")");
      const Tensor& t = p.tensor();
      LOCKSTEP_ENFORCE(t.isContiguous() && (t.dtype() == DType::f32 || t.dtype() == DType::f64), ValueError,
                       "ZeRO: parameter '", it->second, "' must be a contiguous f32 or f64 tensor, got ",
                       t.describe());
      LOCKSTEP_ENFORCE(!options_.param_dtype || t.dtype() == DType::f32, ValueError, "ZeRO: parameter '",
                       it->second, "' must be f32 to keep f32 master weights for ",
                       dtypeName(*options_.param_dtype), " parameters, got ", t.describe());
      LOCKSTEP_ENFORCE(params_.empty() || t.dtype() == params_.front().dtype(), ValueError,
                       "ZeRO: every parameter must have one dtype; '", it->second, "' is ",
                       dtypeName(t.dtype()), ", '", names_.front(), "' is ",
                       dtypeName(params_.front().dtype()));
      params_.push_back(p);
      names_.push_back(it->second);
      group_of.push_back(g);
    }
  }
  if (group_ && world_ > 1) {
    verifySameModelEverywhere(*model_, *group_, "ZeRO");
    // Stage 3's coordinator broadcasts the parameters it partitions itself, a bucket at a time;
    // here the others (frozen ones the optimizer does not hold) and the buffers.
    if (options_.stage == 3) {
      autograd::NoGradGuard ng;
      std::set<const autograd::VariableImpl*> partitioned;
      for (const Variable& p : params_) partitioned.insert(p.impl().get());
      for (auto& [name, p] : model_->namedParameters()) {
        if (!partitioned.count(p.impl().get())) broadcast(*group_, p.tensor(), 0);
      }
      broadcastBuffers(*model_, *group_);
    } else if (options_.broadcast_model) {
      broadcastModel(*model_, *group_);
    }
  }
  // Master weights in param_dtype: the parameters become param_dtype now, and those are what the
  // optimizer steps (rank 0's rounding everywhere: broadcast above, or by stage 3's coordinator).
  if (options_.master_weights_in_param_dtype) {
    autograd::NoGradGuard ng;
    for (Variable& p : params_) {
      p.tensor() = p.tensor().to(*options_.param_dtype);
      p.zeroGrad(true);
    }
  }
  std::vector<size_t> numels_as_bytes;  // assignBuckets counts bytes; the ZeRO caps count elements
  std::vector<int64_t> numels;
  std::vector<DType> dtypes;
  for (const Variable& p : params_) {
    numels.push_back(p.numel());
    numels_as_bytes.push_back(static_cast<size_t>(p.numel()));
    dtypes.push_back(p.dtype());
  }
  if (options_.stage == 3) {
    // Buckets per gather unit (a transformer block, a layer); the coordinator keeps this rank's
    // pieces, which the shards below view, and frees the parameters.
    ZeroBucketPlan plan =
        planZeroBuckets(*model_, params_, options_.reduce_bucket_size, options_.param_persistence_threshold);
    layout_ = makeZeroLayout(numels, plan.buckets, world_);
    coordinator_ =
        std::make_unique<ZeroParameterCoordinator>(params_, layout_, std::move(plan), group_, options_);
    // Built on the host, gathered on a GPU: the parameters are that GPU's tensors now (holding no
    // memory); the buffers and any parameters the optimizer does not hold follow them.
    if (options_.gather_device) model_->to(*options_.gather_device);
  } else {
    BucketAssignmentOptions bo;
    bo.bucket_bytes = bo.first_bucket_bytes = static_cast<size_t>(options_.reduce_bucket_size);
    layout_ = makeZeroLayout(numels, assignBuckets(numels_as_bytes, dtypes, bo), world_);
  }

  offload_cpu_ = options_.offload_optimizer_cpu;
  master_ = options_.param_dtype.has_value() && !options_.master_weights_in_param_dtype;
  LOCKSTEP_ENFORCE(!offload_cpu_ || options_.offload_optimizer.nvme_path.empty(), ValueError,
                   "zero_optimization.offload_optimizer: device cpu and an nvme_path at once");
  // DeepSpeed casts the module to 16 bits before its optimizer clones the f32 master weights from
  // it (initial_rounding): every parameter, on every rank alike; stage 3's coordinator has rounded
  // the pieces of those it partitions.
  if (options_.initial_rounding) {
    std::set<const autograd::VariableImpl*> partitioned;
    if (coordinator_) {
      for (const Variable& p : params_) partitioned.insert(p.impl().get());
    }
    std::vector<Variable> whole;
    for (const Variable& p : model_->parameters()) {
      if (!partitioned.count(p.impl().get())) whole.push_back(p);
    }
    roundInPlace(whole, *options_.initial_rounding);
  }
  std::vector<std::vector<Variable>> shard_vars(groups.size());
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    const ZeroBucket& bucket = layout_.buckets[b];
    for (const ZeroSegment& s : segmentsIn(bucket, bucket.piece[rank_], bucket.piece[rank_ + 1])) {
      // Stage 3: the shards view the coordinator's pieces; below, the parameters' own elements.
      const Tensor view =
          coordinator_
              ? coordinator_->piece(b).narrow(0, s.bucket_offset - bucket.piece[rank_], s.numel)
              : params_[s.param].tensor().view({params_[s.param].numel()}).narrow(0, s.param_offset, s.numel);
      Tensor elements, values = view;
      // The optimizer's shard is a host copy of the parameter's elements, unless it steps the
      // host pieces of offload_param cpu themselves; with master weights below stage 3 an f32
      // copy of them (on the host with offload) that the parameter's elements are rounded from.
      if ((offload_cpu_ && !options_.offload_param_cpu) || (master_ && !coordinator_)) {
        elements = view;
        values = Tensor::empty({s.numel}, view.dtype(), MemoryFormat::contiguous,
                               offload_cpu_ ? Device::cpu() : view.device());
        if (offload_cpu_ && options_.offload_optimizer_pin_memory) values = values.pinMemory();
        values.copyFrom(view);
      }
      Shard shard{Variable(values, true),
                  elements,
                  Tensor(),
                  s.param,
                  b,
                  s.param_offset,
                  s.bucket_offset - bucket.piece[rank_],
                  s.numel};
      shard_vars[group_of[s.param]].push_back(shard.var);
      shards_.push_back(std::move(shard));
    }
  }
  for (size_t g = 0; g < groups.size(); ++g) groups[g].params = std::move(shard_vars[g]);
  // Master weights below stage 3: the f32 values are in the shards now; the parameters become
  // their rounding (stage 3's coordinator gathers in param_dtype itself), and every gradient,
  // reduction and gather after this is in that dtype.
  if (master_ && !coordinator_) {
    autograd::NoGradGuard ng;
    for (Variable& p : params_) {
      p.tensor() = p.tensor().to(*options_.param_dtype);
      p.zeroGrad(true);
    }
    for (Shard& s : shards_)
      s.elements =
          params_[s.param].tensor().view({params_[s.param].numel()}).narrow(0, s.param_offset, s.numel);
  }
  // The optimizer's own numbering of the shards (its state dict's), and the groups' parameters in
  // the numbering of the optimizer as it was (a consolidated state dict's).
  std::unordered_map<const autograd::VariableImpl*, int64_t> opt_index;
  for (const auto& g : groups)
    for (const Variable& v : g.params)
      opt_index.emplace(v.impl().get(), static_cast<int64_t>(opt_index.size()));
  for (Shard& s : shards_) s.opt_index = opt_index.at(s.var.impl().get());
  group_params_.resize(groups.size());
  for (size_t p = 0; p < params_.size(); ++p) group_params_[group_of[p]].push_back(static_cast<int64_t>(p));
  group_of_ = group_of;
  // Stage 3 with the states on NVMe swaps the gradient partition too (made in swapPartition).
  if (options_.stage == 2 || (options_.stage == 3 && options_.offload_optimizer.nvme_path.empty()))
    reducer_ = std::make_unique<ZeroGradReducer>(params_, names_, layout_, group_, options_.overlap_comm,
                                                 options_.reduce_scatter, "", "", offload_cpu_,
                                                 options_.offload_optimizer_pin_memory);
  if (!options_.offload_optimizer.nvme_path.empty()) swapPartition();
  // Stage 3: a unit's gradients are made beside one bucket's reduction in flight, not two.
  if (coordinator_ && reducer_)
    coordinator_->setBeforeUnitBackward([r = reducer_.get()] { r->completeAllButLatest(); });

  for (const Variable& p : params_) shapes_.push_back(p.shape());
  // Whether the host step fuses, agreed by every rank (collective): a rank whose partition is empty
  // (fewer elements than ranks) would say yes to any optimizer, and ranks that disagree run
  // different collectives in Engine::gradientPhase.
  fuses_host_step_ = options_.fused_host_step && !offload_ && !(coordinator_ && coordinator_->pieceSwap()) &&
                     optimizer_->stepsFused();
  if (group_ && world_ > 1)
    fuses_host_step_ = allreduceScalar(*group_, fuses_host_step_ ? 1.0 : 0.0, comm::ReduceOp::min) != 0.0;
  // Stage 3: the whole parameters the model was built with are freed now; hand their bytes back to
  // the system rather than keep a whole model's worth cached for gathers that need a layer's.
  if (coordinator_) {
    CachingAllocator::instance().emptyCache();
#if LOCKSTEP_WITH_CUDA
    const Device d = device();
    if (d.isCuda()) cuda::CudaCachingAllocator::forDevice(d.index).emptyCache();
#endif
  }
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::swapPartition() {
  const std::string& dir = options_.offload_optimizer.nvme_path;
  std::vector<ZeroNvmeOffload::Shard> offloaded;
  for (const Shard& s : shards_) offloaded.push_back({s.var, group_of_[s.param], s.opt_index});
  std::exception_ptr failed;
  try {
    offload_ = std::make_unique<ZeroNvmeOffload>(optimizer_, std::move(offloaded),
                                                 params_.empty() ? DType::f32 : params_.front().dtype(),
                                                 rank_, options_.offload_optimizer);
    // Stage 3 swaps the partition's gradients with the states (as DeepSpeed's ZeRO-Infinity does);
    // the coordinator swaps its parameter pieces with offload_param nvme.
    if (options_.stage == 3)
      reducer_ = std::make_unique<ZeroGradReducer>(params_, names_, layout_, group_, options_.overlap_comm,
                                                   options_.reduce_scatter, dir,
                                                   "zero_optimization.offload_optimizer.nvme_path",
                                                   /*host_pieces=*/true);
  } catch (const Error&) {
    failed = std::current_exception();
  }
  // A full or missing disk on one node: every rank says so rather than wait at the next collective.
  rethrowIfAnyRankFailed(
      group_.get(), failed,
      "ZeRO NVMe offload: another rank could not create its swap file under " + dir + " (its log says why)");
  if (options_.stage != 3) return;
  // The optimizer steps the shards in order, so a bucket's shards are stepped one after the other:
  // its parameter and gradient pieces come into memory before its first shard's first elements step
  // and go back (the parameters written) after its last shard's last elements.
  offload_->setShardHooks(
      [this](size_t i) {
        if (i > 0 && shards_[i - 1].bucket == shards_[i].bucket) return;
        coordinator_->acquirePiece(shards_[i].bucket);
        reducer_->acquirePiece(shards_[i].bucket);
      },
      [this](size_t i) {
        if (i + 1 < shards_.size() && shards_[i + 1].bucket == shards_[i].bucket) return;
        coordinator_->releasePiece(shards_[i].bucket, true);
        reducer_->releasePiece(shards_[i].bucket, false);
      });
}

const ZeroPieceSwap* ZeroOptimizer::parameterSwap() const {
  return coordinator_ ? coordinator_->pieceSwap() : nullptr;
}

const ZeroPieceSwap* ZeroOptimizer::gradientSwap() const {
  return reducer_ ? reducer_->pieceSwap() : nullptr;
}

void ZeroOptimizer::forEachShard(Pieces which, bool changes,
                                 const std::function<void(const Shard&)>& fn) const {
  // The shards go bucket by bucket: one bucket's pieces in memory at a time (nothing to do where
  // the pieces are not swapped).
  const bool grads = which == Pieces::gradients;
  auto acquire = [&](size_t b) {
    if (grads && reducer_) reducer_->acquirePiece(b);
    if (!grads && coordinator_) coordinator_->acquirePiece(b);
  };
  auto release = [&](size_t b) {
    if (grads && reducer_) reducer_->releasePiece(b, changes);
    if (!grads && coordinator_) coordinator_->releasePiece(b, changes);
  };
  long held = -1;
  auto drop = [&] {
    if (held >= 0) release(static_cast<size_t>(held));
    held = -1;
  };
  try {
    for (const Shard& s : shards_) {
      if (grads && !s.var.hasGrad()) continue;
      if (static_cast<long>(s.bucket) != held) {
        drop();
        acquire(s.bucket);
        held = static_cast<long>(s.bucket);
      }
      fn(s);
    }
  } catch (...) {
    drop();
    throw;
  }
  drop();
}

Tensor ZeroOptimizer::partitionGradient(const Shard& s) const {
  if (reducer_) return reducer_->piece(s.bucket).narrow(0, s.piece_offset, s.numel);
  const Variable& p = params_[s.param];
  if (!p.hasGrad()) return Tensor();
  Tensor g = p.grad();
  if (!g.isContiguous()) g = g.contiguous();
  return g.view({p.numel()}).narrow(0, s.param_offset, s.numel);
}

void ZeroOptimizer::pointShardGradients() {
  // With offload_optimizer_cpu, once per step (clipping and the loss scaler's unscale come before
  // the step and change the host copies): the partition's gradients, wherever they are, copied to
  // the host.
  // With master weights likewise, into f32 copies beside the master values.
  const bool copies = offload_cpu_ || master_;
  if (copies && host_grads_current_) return;
  if (reducer_) reducer_->checkComplete();
  // (A GPU run's stage 2 and 3 reduce into host pieces already.)
  const bool moved = offload_cpu_ && !(reducer_ && reducer_->piecesOnHost());
  bool queued = false;                 // copies down into pinned memory still on their way
  std::vector<Tensor> widened, grads;  // casts on the gradients' own device: one multi-tensor launch
  for (Shard& s : shards_) {
    Tensor g = partitionGradient(s);
    if (g.defined() && (moved || g.dtype() != s.var.dtype())) {
      if (!s.host_grad.defined()) {
        s.host_grad =
            Tensor::empty({s.numel}, s.var.dtype(), MemoryFormat::contiguous, s.var.tensor().device());
        if (offload_cpu_ && options_.offload_optimizer_pin_memory) s.host_grad = s.host_grad.pinMemory();
      }
      if (g.device() == s.host_grad.device()) {
        widened.push_back(s.host_grad);
        grads.push_back(g);
      } else {
        // A GPU gradient into pinned memory of its dtype: queued, all of them waited for once
        // below (not a wait per gradient).
        const bool async = g.isCuda() && s.host_grad.isPinned() && g.dtype() == s.host_grad.dtype();
        s.host_grad.copyFrom(g, async);
        queued = queued || async;
      }
      g = s.host_grad;
    }
    s.var.setGrad(g);
  }
  Tensor::copyMany(widened, grads);
  if (queued) waitForCopies(placeOf(device()));
  host_grads_current_ = copies;
}

void ZeroOptimizer::step(double grad_scale) {
  const bool fused = fusesHostStep();
  LOCKSTEP_CHECK(grad_scale == 1.0 || fused, "ZeroOptimizer::step: a grad_scale needs the fused host step");
  pointShardGradients();
  // Host memory the step writes may still be read by copies queued on the GPU: offload_param's
  // pieces by gathers, ZeRO-Offload's host copies by the last step's uploads.
  if (offload_cpu_ || (coordinator_ && coordinator_->piecesOffDevice())) waitForCopies(placeOf(device()));
  bool rounded = false;  // the master weights' 16-bit copies written by the fused step
  if (offload_) {
    offload_->step();  // streams the states through the swap file, a sub-group at a time
  } else if (offload_cpu_) {
    stepAndUpload(grad_scale);  // and the values copied to the parameters
    rounded = fused;
  } else if (fused) {
    optim::Optimizer::FusedStepExtras extras;
    extras.grad_scale = grad_scale;
    for (Shard& s : shards_)
      if (Tensor c = fusedCopy(s); c.defined()) extras.copies.emplace(s.var.tensor().dataPtr(), c);
    optimizer_->stepFused(extras);
    rounded = true;
  } else {
    optimizer_->step();
  }
  if (offload_cpu_ || master_) {
    if (!offload_cpu_ && !rounded) copyShardsToParameters();
    host_grads_current_ = false;  // the next step copies the gradients afresh
  }
  if (master_ && !offload_cpu_) dropGradientCopies();  // the f32 copies live for the step only
  if (options_.stage == 3) {
    if (!rounded) coordinator_->roundPieces();  // offload_param with master weights: what the gathers send
    releaseParameters();                        // stale now; the next forward gathers the stepped values
  } else {
    allgatherParameters();
  }
}

bool ZeroOptimizer::fusesHostStep() const { return fuses_host_step_; }

Tensor ZeroOptimizer::fusedCopy(Shard& s) {
  if (!master_) return Tensor();
  if (coordinator_) {  // offload_param's rounded pieces (else the gathers round the f32 pieces)
    const Tensor rounded = coordinator_->roundedPiece(s.bucket);
    return rounded.defined() ? rounded.narrow(0, s.piece_offset, s.numel) : Tensor();
  }
  if (!s.elements.defined()) return Tensor();
  if (!s.elements.isCuda()) return s.elements;  // the 16-bit parameter's host elements themselves
  if (!s.upload.defined()) s.upload = Tensor::empty({s.numel}, s.elements.dtype()).pinMemory();
  return s.upload;  // ZeRO-Offload's staging, then a DMA (copyShardToParameter)
}

bool ZeroOptimizer::parametersGathered() const { return !coordinator_ || coordinator_->allGathered(); }

void ZeroOptimizer::forEachParameterBucketWhole(const std::function<void(const std::vector<size_t>&)>& fn) {
  if (coordinator_) {
    coordinator_->forEachBucketWhole(fn);
    return;
  }
  std::vector<size_t> all(params_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  fn(all);
}

void ZeroOptimizer::beginStep() {
  if (coordinator_) coordinator_->beginStep();
}

void ZeroOptimizer::gatherParameters() {
  if (coordinator_) coordinator_->gatherAll();
}

void ZeroOptimizer::releaseParameters() {
  if (coordinator_) coordinator_->endStep();
}

void ZeroOptimizer::copyShardsToParameters() {
  // Master values rounded into parameters on their own device: one multi-tensor launch for all.
  std::vector<Tensor> elements, values;
  for (Shard& s : shards_) {
    if (s.elements.defined() && s.elements.device() == s.var.tensor().device()) {
      elements.push_back(s.elements);
      values.push_back(s.var.tensor());
    } else {
      copyShardToParameter(s);
    }
  }
  autograd::NoGradGuard ng;
  Tensor::copyMany(elements, values);
}

void ZeroOptimizer::copyShardToParameter(Shard& s) {
  // From pinned host copies the uploads are queued on the GPU's stream and the host goes on (the
  // all-gather after them is ordered behind them; the next step waits for them before writing).
  if (!s.elements.defined()) return;
  autograd::NoGradGuard ng;
  // f32 host master weights to 16-bit GPU parameters: rounded on the host into pinned memory
  // (half the bytes to move), then a DMA that does not hold the host up (DeepSpeed's path).
  if (master_ && offload_cpu_ && s.elements.isCuda()) {
    if (!s.upload.defined()) s.upload = Tensor::empty({s.numel}, s.elements.dtype()).pinMemory();
    s.upload.copyFrom(s.var.tensor());
    s.elements.copyFrom(s.upload, /*non_blocking=*/true);
    return;
  }
  s.elements.copyFrom(s.var.tensor(), /*non_blocking=*/true);
}

void ZeroOptimizer::stepAndUpload(double grad_scale) {
  // The optimizer steps a run of shards of about offload_step_chunk elements at a time (its groups
  // narrowed to them for the call: its updates are per element and each shard keeps its own step
  // count, so the result is bitwise one whole step's), and each run's updated values are queued for
  // the GPU while the host steps the next: the copies up overlap the host's step instead of
  // following it. Fused (fusesHostStep()): the run's master weights are rounded as they are
  // stepped, so only the DMA is left.
  const bool fused = fusesHostStep();
  const int64_t chunk = options_.offload_step_chunk;
  auto& groups = optimizer_->paramGroups();
  std::vector<std::vector<Variable>> saved(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) saved[i] = std::move(groups[i].params);
  auto restore = [&] {
    for (size_t i = 0; i < groups.size(); ++i) groups[i].params = std::move(saved[i]);
  };
  try {
    for (size_t begin = 0; begin < shards_.size();) {
      size_t end = begin;
      int64_t elements = 0;
      for (auto& g : groups) g.params.clear();
      optim::Optimizer::FusedStepExtras extras;
      extras.grad_scale = grad_scale;
      while (end < shards_.size() && (end == begin || elements < chunk)) {
        Shard& s = shards_[end];
        groups[group_of_[s.param]].params.push_back(s.var);
        if (fused)
          if (Tensor c = fusedCopy(s); c.defined()) extras.copies.emplace(s.var.tensor().dataPtr(), c);
        elements += s.numel;
        ++end;
      }
      if (fused) {
        optimizer_->stepFused(extras);
      } else {
        optimizer_->step();
      }
      for (size_t i = begin; i < end; ++i) {
        Shard& s = shards_[i];
        if (!fused || !extras.copies.count(s.var.tensor().dataPtr())) {
          copyShardToParameter(s);
        } else if (s.elements.defined() && s.elements.isCuda() && s.var.hasGrad()) {
          autograd::NoGradGuard ng;
          s.elements.copyFrom(s.upload, /*non_blocking=*/true);  // rounded by the step
        }
      }
      begin = end;
    }
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

void ZeroOptimizer::copyShardsFromParameters() {
  autograd::NoGradGuard ng;
  for (Shard& s : shards_) {
    Tensor host = s.var.tensor();
    if (s.elements.defined()) host.copyFrom(s.elements);
  }
}

void ZeroOptimizer::adoptGatheredParameters() {
  if (!coordinator_) {
    if (offload_cpu_ || master_) copyShardsFromParameters();
    return;
  }
  LOCKSTEP_CHECK(coordinator_->allGathered(),
                 "ZeRO stage 3: adoptGatheredParameters needs gathered parameters");
  autograd::NoGradGuard ng;
  if (coordinator_->piecesOffDevice()) waitForCopies(placeOf(device()));
  forEachShard(Pieces::parameters, true, [&](const Shard& s) { adoptShard(s); });
  coordinator_->roundPieces();
}

void ZeroOptimizer::adoptShard(const Shard& s) { adoptShard(s, params_[s.param].tensor()); }

void ZeroOptimizer::adoptShard(const Shard& s, const Tensor& whole) {
  Tensor src = whole.contiguous();
  Tensor dst = s.var.tensor();
  dst.copyFrom(src.view({src.numel()}).narrow(0, s.param_offset, s.numel));
  // ZeRO-Offload's host copy stepped, and the piece gathered: both hold the loaded values.
  if (s.elements.defined()) {
    Tensor elements = s.elements;
    elements.copyFrom(dst);
  }
}

void ZeroOptimizer::adoptParameters(const std::vector<size_t>& indices,
                                    const std::function<Tensor(size_t)>& values) {
  std::vector<bool> chosen(params_.size(), false);
  for (size_t i : indices) chosen.at(i) = true;
  autograd::NoGradGuard ng;
  auto adopt = [&](const Shard& s) {
    if (values) {
      const Tensor whole = values(s.param);
      LOCKSTEP_ENFORCE(whole.numel() == params_[s.param].numel(), ValueError, "ZeRO: values of parameter '",
                       names_[s.param], "' have ", whole.numel(), " elements, the parameter ",
                       params_[s.param].numel());
      adoptShard(s, whole);
    } else {
      adoptShard(s);
    }
  };
  if (!coordinator_) {
    if (offload_cpu_) waitForCopies(placeOf(device()));  // last step's uploads read the host copies
    for (const Shard& s : shards_)
      if (chosen[s.param]) adopt(s);
    return;
  }
  if (coordinator_->piecesOffDevice()) waitForCopies(placeOf(device()));
  // Bucket by bucket (shards are in bucket order), only the buckets holding a chosen shard.
  for (size_t i = 0; i < shards_.size();) {
    const size_t b = shards_[i].bucket;
    size_t end = i;
    bool any = false;
    for (; end < shards_.size() && shards_[end].bucket == b; ++end) any = any || chosen[shards_[end].param];
    if (any) {
      coordinator_->acquirePiece(b);
      for (; i < end; ++i) {
        if (chosen[shards_[i].param]) adopt(shards_[i]);
      }
      coordinator_->releasePiece(b, true);
      // Its rounding only: while a checkpoint loads bucket by bucket, the next bucket's gather may
      // be reading its own rounding already.
      coordinator_->roundPiece(b);
    }
    i = end;
  }
}

void ZeroOptimizer::allgatherParameters() {
  if (params_.empty()) return;
  std::vector<char*> full;
  for (Variable& p : params_) full.push_back(static_cast<char*>(p.tensor().devicePtr()));
  gatherPieces(full, device(), params_.front().dtype());
  // On a GPU the gather buffers (a bucket's worth, the whole model's with the default bucket sizes)
  // go back to the allocator between steps, as DeepSpeed holds no such buffer: not model state.
  // (The host keeps them: zeroing them anew each step would cost a pass over them.)
  if (device().isCuda()) {
    gather_send_ = Tensor();
    gather_recv_ = Tensor();
  }
}

void ZeroOptimizer::gatherPieces(const std::vector<char*>& full, const Device& where, DType dtype, int root,
                                 const std::function<const char*(size_t, int64_t)>& mine) {
  if (world_ == 1 || params_.empty()) return;  // this rank's piece is everything
  const int64_t cap = std::max<int64_t>(1, options_.allgather_bucket_size / world_);
  // Made on first use (stage 3 gathers this way only for checkpoints) where the pointers are.
  if (!gather_send_.defined() || gather_send_.device() != where || gather_send_.dtype() != dtype) {
    int64_t block = 0;  // the largest all-gather block: a bucket's chunk, capped by allgather_bucket_size
    for (const ZeroBucket& b : layout_.buckets) block = std::max(block, std::min(b.chunk, cap));
    gather_send_ = Tensor::zeros({block}, dtype, where);
    gather_recv_ = Tensor::zeros({block * world_}, dtype, where);
  }
  const size_t elem = dtypeSize(gather_send_.dtype());
  char* send = static_cast<char*>(gather_send_.devicePtr());
  char* recv = static_cast<char*>(gather_recv_.devicePtr());
  const comm::BufferPlace place = placeOf(gather_send_);
  for (const ZeroBucket& bucket : layout_.buckets) {
    for (int64_t from = 0; from < bucket.chunk; from += cap) {
      const int64_t len = std::min(cap, bucket.chunk - from);
      // Block [from, from + len) of every rank's piece; shorter pieces pad with what send held.
      const int64_t mine_end = std::min(from + len, bucket.pieceSize(rank_));
      for (const ZeroSegment& s :
           segmentsIn(bucket, bucket.piece[rank_] + from, bucket.piece[rank_] + mine_end)) {
        copyBytes(send + (s.bucket_offset - bucket.piece[rank_] - from) * elem,
                  mine ? mine(s.param, s.param_offset) : full[s.param] + s.param_offset * elem,
                  s.numel * elem, place);
      }
      if (root >= 0) {
        comm::GatherOptions go;
        go.root = root;
        go.place = place;
        group_->gather(send, recv, static_cast<size_t>(len), gather_send_.dtype(), go)->wait();
        if (rank_ != root) continue;
      } else if (options_.allgather_partitions) {
        comm::AllgatherOptions ao;
        ao.place = place;
        group_->allgather(send, recv, static_cast<size_t>(len), gather_send_.dtype(), ao)->wait();
      } else {  // DeepSpeed's allgather_partitions: false: one broadcast per rank's block
        copyBytes(recv + rank_ * len * elem, send, len * elem, place);
        for (int r = 0; r < world_; ++r) {
          comm::BroadcastOptions bo;
          bo.root = r;
          bo.place = place;
          group_->broadcast(recv + r * len * elem, static_cast<size_t>(len), gather_send_.dtype(), bo)
              ->wait();
        }
      }
      for (int r = 0; r < world_; ++r) {
        if (r == rank_) continue;  // this rank's piece is already in place
        const int64_t end = std::min(from + len, bucket.pieceSize(r));
        for (const ZeroSegment& s : segmentsIn(bucket, bucket.piece[r] + from, bucket.piece[r] + end)) {
          copyBytes(full[s.param] + s.param_offset * elem,
                    recv + (r * len + s.bucket_offset - bucket.piece[r] - from) * elem, s.numel * elem,
                    place);
        }
      }
    }
  }
}

void ZeroOptimizer::dropGradientCopies() {
  for (Shard& s : shards_) {
    s.var.setGrad(Tensor());
    // Master weights on the parameters' device: the f32 gradient copies live for a step only (as
    // DeepSpeed's), not between steps; ZeRO-Offload's pinned host copies are kept for reuse.
    if (master_ && !offload_cpu_) s.host_grad = Tensor();
  }
}

void ZeroOptimizer::zeroGrad() {
  dropGradientCopies();
  host_grads_current_ = false;
  if (reducer_) {
    reducer_->zero();
    return;
  }
  for (Variable& p : params_) p.setGrad(Tensor());
}

std::vector<Tensor> ZeroOptimizer::deviceGradients() const {
  std::vector<Tensor> grads;
  if (!device().isCuda() || (reducer_ && reducer_->pieceSwap())) return grads;
  for (const Shard& s : shards_) {
    if (!s.var.hasGrad()) continue;
    if (!s.var.grad().isCuda()) return {};  // ZeRO-Offload's host copies: the host's loops
    grads.push_back(s.var.grad());
  }
  return grads;
}

double ZeroOptimizer::gradNorm() {
  pointShardGradients();
  // On a GPU the shards' joint norm in one kernel and one read (not a read per shard); else
  // optim::gradNorm over the shards, computed a bucket's gradient pieces at a time.
  const std::vector<Tensor> on_device = deviceGradients();
  double local = 0.0;
  if (!on_device.empty()) {
    local = kernels::totalNorm(on_device, 2.0).item<double>();
  } else {
    std::vector<double> norms;
    forEachShard(Pieces::gradients, false,
                 [&](const Shard& s) { norms.push_back(optim::tensorNorm(s.var.grad())); });
    local = optim::combineNorms(norms);
  }
  double total = local * local;
  if (group_ && world_ > 1) total = allreduceScalar(*group_, total, comm::ReduceOp::sum);
  return std::sqrt(total);
}

double ZeroOptimizer::clipGradNorm(double max_norm) {
  const double total = gradNorm();
  const double coef = optim::clipCoefficient(total, max_norm);
  if (coef == 1.0) return total;
  if (const std::vector<Tensor> on_device = deviceGradients(); !on_device.empty()) {
    for (Tensor g : on_device) kernels::scaleInPlace(g, coef);
    return total;
  }
  forEachShard(Pieces::gradients, true, [&](const Shard& s) {
    Tensor g = s.var.grad();
    kernels::scaleAndCheckNonFinite(g, coef);
  });
  return total;
}

bool ZeroOptimizer::unscaleAndCheckOverflow(double factor) {
  pointShardGradients();
  bool overflow = false;
  // On a GPU every shard sets one device flag, read once (the engine's rule for DDP).
  if (std::vector<Tensor> on_device = deviceGradients(); !on_device.empty()) {
    Tensor found_inf = Tensor::zeros({1}, DType::f32, device());
    for (Tensor& g : on_device) kernels::scaleAndCheckNonFiniteInto(g, factor, found_inf);
    overflow = found_inf.item<float>() != 0.0f;
  } else {
    forEachShard(Pieces::gradients, factor != 1.0, [&](const Shard& s) {
      Tensor g = s.var.grad();
      // factor 1 (a check alone, bf16's check_grad_overflow): the gradients are only read.
      overflow =
          (factor == 1.0 ? kernels::hasNonFinite(g) : kernels::scaleAndCheckNonFinite(g, factor)) || overflow;
    });
  }
  if (group_ && world_ > 1)
    overflow = allreduceScalar(*group_, overflow ? 1.0 : 0.0, comm::ReduceOp::max) != 0.0;
  return overflow;
}

ModelStateBytes ZeroOptimizer::memory() const {
  ModelStateBytes m;
  for (const Variable& p : params_) m.parameters += static_cast<int64_t>(p.tensor().nbytes());
  m.gradients = reducer_ ? static_cast<int64_t>(reducer_->pieceBytes()) : m.parameters;
  if (coordinator_) m.parameters = coordinator_->residentBytes();
  // With NVMe offload, what the states take in memory: the swap buffers.
  m.optimizer_states = offload_ ? offload_->memoryBytes() : optimizerStateBytes(*optimizer_);
  // Master weights below stage 3 without offload: the f32 copies of the partition's values count
  // with the optimizer's states, as in DeepSpeed's 12 bytes per parameter (stage 3's are the pieces).
  if (master_ && !offload_cpu_) {
    for (const Shard& s : shards_)
      if (s.elements.defined()) m.optimizer_states += static_cast<int64_t>(s.var.tensor().nbytes());
  }
  if (device().isCuda()) {
    // The states (ZeRO-Offload's, or the NVMe offload's buffers), ZeRO-Offload's f32 host copies
    // of the values (unless offload_param's pieces are stepped themselves), and the gradients: the
    // reducer's host pieces, else (stage 1) host copies.
    if (offload_cpu_ || offload_) m.host_offload += m.optimizer_states;
    if (offload_cpu_) {
      for (const Shard& s : shards_) {
        const int64_t elem = static_cast<int64_t>(dtypeSize(s.var.dtype()));
        if (s.elements.defined()) m.host_offload += s.numel * elem;
        if (!reducer_) m.host_offload += s.numel * elem;
        if (s.upload.defined()) m.host_offload += static_cast<int64_t>(s.upload.nbytes());
      }
    }
    if (reducer_ && reducer_->piecesOnHost()) m.host_offload += m.gradients;
    if (coordinator_ && coordinator_->pieceDevice().isCpu()) {  // offload_param (nvme: those in memory)
      if (const ZeroPieceSwap* swap = coordinator_->pieceSwap()) {
        m.host_offload += swap->residentBytes();
      } else {
        for (size_t b = 0; b < layout_.buckets.size(); ++b)
          m.host_offload += static_cast<int64_t>(coordinator_->piece(b).nbytes());
        m.host_offload += coordinator_->roundedBytes();
      }
    }
  }
  return m;
}

}  // namespace lockstep::parallel
