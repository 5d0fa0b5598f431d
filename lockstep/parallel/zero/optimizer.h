#pragma once
// ZeRO (DeepSpeed's Zero Redundancy Optimizer), stages 1, 2 and 3, for any optimizer that steps flat
// spans (optim/optimizer.h): each of N ranks keeps the optimizer states of 1/N of the parameter
// elements (its partition, zero/partition.h), steps only those, and all-gathers the updated
// parameters. Stage 2 also keeps only its partition of the gradients: they are reduce-scattered
// in buckets while backward runs (zero/grad_reducer.h). Stage 3 reduces gradients as stage 2 and
// keeps only its partition of the parameters too (zero/parameter_coordinator.h): the model's
// parameters are whole only while a forward or backward uses them, one gather unit (a layer, a
// transformer block) at a time, between beginStep() and releaseParameters(), or all of them
// between gatherParameters() and releaseParameters() (evaluation, state dicts).
//
// The optimizer is taken over: its parameter groups are re-pointed at "shard" variables, views of
// this rank's pieces of the parameters, so its hyper-parameters, schedulers and per-element
// updates stay as they were (a shard steps bitwise as the whole parameter would) and its state
// covers the partition only. Build it before the optimizer's first step.
//
// Library use (parallel::Engine does all of this when EngineOptions.zero_stage is 1, 2 or 3):
//   auto opt = std::make_shared<optim::Adam>(model->parameters());
//   // stage 1: gradients are averaged by DDP; stage 2: by the ZeroOptimizer itself
//   auto ddp = std::make_shared<DistributedDataParallel>(model, group);       // stage 1 only
//   ZeroOptimizer zero(model, opt, group, {.stage = 1});
//   for (...) { loss(ddp->forward(x)).backward(); zero.step(); zero.zeroGrad(); }
//   // stage 3: zero.beginStep() before each forward, zero.releaseParameters() after backward
//
// Not thread-safe. The constructor, step(), clipGradNorm(), unscaleAndCheckOverflow() and (stage 3)
// beginStep(), gatherParameters() and releaseParameters() are collective; with stages 2 and 3 so
// is every backward, and with stage 3 every forward.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/nn/module.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/parallel/memory_report.h"
#include "lockstep/parallel/zero/grad_reducer.h"
#include "lockstep/parallel/zero/nvme_offload.h"
#include "lockstep/parallel/zero/partition.h"
#include "lockstep/parallel/zero/piece_swap.h"

namespace lockstep::parallel {

class ZeroParameterCoordinator;

/// DeepSpeed's zero_optimization keys that the ZeRO optimizer implements (config.cpp maps the
/// JSON onto this; DeepSpeed's defaults).
struct ZeroOptions {
  /// 1: optimizer states partitioned; 2: and gradients; 3: and parameters (each rank keeps its
  /// partition only; layers are gathered for their forward and backward, one at a time).
  /// (0 is DDP: no ZeroOptimizer.)
  int stage = 1;
  /// Elements per gradient bucket (reduce-scatter unit of stage 2, and the partition's buckets).
  int64_t reduce_bucket_size = 500'000'000;
  /// Elements all-gathered at a time after the step (DeepSpeed's allgather_bucket_size).
  int64_t allgather_bucket_size = 500'000'000;
  /// Stage 2: let a bucket's reduce-scatter run while backward goes on (DeepSpeed's overlap_comm);
  /// false waits for each bucket's reduction as soon as it is launched.
  bool overlap_comm = true;
  /// Stage 2: reduce-scatter each bucket (true) or allreduce it and keep this rank's piece
  /// (DeepSpeed's reduce_scatter: false).
  bool reduce_scatter = true;
  /// Gather the updated parameters with allgather (true) or with one broadcast per rank
  /// (DeepSpeed's allgather_partitions: false).
  bool allgather_partitions = true;
  // Stage 3's gathering (zero/parameter_coordinator.h), DeepSpeed's stage3_* keys and defaults.
  /// Elements of the next layers' parameters all-gathered ahead of use (0: no prefetch).
  int64_t prefetch_bucket_size = 50'000'000;
  /// Parameters of at most this many elements are not gathered and freed around each layer: they
  /// are gathered once per step, with the parameters of no layer.
  int64_t param_persistence_threshold = 100'000;
  /// Whole parameter elements a rank may hold at once beyond those in use: prefetching and keeping
  /// layers for reuse stop there.
  int64_t max_live_parameters = 1'000'000'000;
  /// A layer whose backward comes within this many parameter elements of its forward's end (the
  /// elements of the layers after it, forward and backward) stays whole in between.
  int64_t max_reuse_distance = 1'000'000'000;
  /// offload_optimizer with device nvme: the partition's optimizer states live in a swap file
  /// under nvme_path between steps (zero/nvme_offload.h). Empty nvme_path: in memory.
  NvmeOffloadOptions offload_optimizer{};
  /// offload_optimizer with device cpu (ZeRO-Offload): the optimizer steps f32 host copies of
  /// this rank's pieces (its states in host memory); before each step the partition's gradients
  /// are copied to the host, after it the updated pieces back to the parameters (stage 3: to the
  /// pieces), which are then all-gathered where they live. With offload_param_cpu (stage 3) the
  /// pieces are host memory already and the optimizer steps them in place. The config sets it for
  /// GPU runs (on a CPU run the states live on the host anyway); on host parameters it is a copy.
  bool offload_optimizer_cpu = false;
  /// Not a DeepSpeed key. ZeRO-Offload (offload_optimizer_cpu): the host step goes a run of
  /// shards of about this many elements at a time, each run's updated values copied to the
  /// parameters as soon as it is stepped, so that on a GPU the copies up overlap the step of the
  /// next run. Bitwise the same result whatever the size for optimizers whose updates are per
  /// element and per parameter (SGD, Adam, AdamW: each shard keeps its own state and step count),
  /// as the NVMe offload's sub-groups assume too.
  int64_t offload_step_chunk = int64_t{1} << 22;
  /// Not a DeepSpeed key. Where the partition is stepped on the host in f32 by an optimizer that
  /// fuses (optim::Optimizer::stepsFused: Adam, AdamW), the passes around the update go into its
  /// own (DeepSpeedCPUAdam's adam_update_copy): the clipping coefficient is applied as the
  /// gradients are read, and master weights are rounded into their 16-bit parameters (or
  /// ZeRO-Offload's upload staging, offload_param's rounded pieces) as they are stepped. Bitwise
  /// the separate passes' results; false runs those passes (the comparison of tests and benches).
  bool fused_host_step = true;
  /// offload_optimizer.pin_memory: the host copies (values and gradients) in page-locked memory,
  /// so the copies to and from a GPU are direct DMA.
  bool offload_optimizer_pin_memory = false;
  /// offload_param with device cpu (stage 3, with offload_optimizer_cpu; the config sets it for
  /// GPU runs): this rank's pieces of the parameters live in host memory and each gather copies
  /// them to the parameters' GPU (zero/parameter_coordinator.h), so the GPU holds whole parameters
  /// only while they are used, and no piece of the partition between uses.
  bool offload_param_cpu = false;
  /// offload_param.pin_memory: those host pieces page-locked (direct DMA to the GPU).
  bool offload_param_pin_memory = false;
  /// offload_param with device nvme (stage 3, with offload_optimizer device nvme): this rank's
  /// pieces of the parameters live in a swap file under this directory and are read into memory
  /// only for their all-gather and their optimizer step; the gradient pieces are swapped as well
  /// (zero/piece_swap.h). Empty: in memory.
  std::string offload_param_nvme_path;
  /// offload_param.buffer_size: the most elements a rank's piece of one bucket may have with
  /// offload_param nvme (DeepSpeed's check that every partitioned parameter fits a swap buffer).
  int64_t offload_param_buffer_size = 100'000'000;
  /// Not a DeepSpeed key. true: the constructor broadcasts rank 0's model (parameters and buffers)
  /// to the group. false: the caller's ranks hold equal values already and only the optimizer's
  /// parameters are the group's business (a pipeline stage's replicas, built from one seed, whose
  /// models hold the other stages' layers without memory: parallel/pipeline/). Stages 1 and 2.
  bool broadcast_model = true;
  /// DeepSpeed's bf16 / fp16 with ZeRO (mixed precision with master weights): the model's
  /// parameters, their gradients and their gathers in this dtype (bf16 or f16), and this rank's
  /// partition of the values the optimizer steps in f32 ("master weights": stages 1-2 copies of
  /// its elements, stage 3 its pieces), updated in f32 and rounded into the parameters after each
  /// step. Gradients are reduced in this dtype and copied into f32 for clipping, the loss
  /// scaler's unscale and the step. Model states per rank, Psi parameters, Adam, N ranks: stage 1
  /// 2+2+12/N Psi, stage 2 2+14/N Psi, stage 3 (4+2+8)/N Psi (DeepSpeed's (2+2+12)/N: the f32
  /// pieces are the master weights and what a gather rounds). The parameters must be f32 when the
  /// ZeroOptimizer is built (it rounds them). nullopt: the parameters' own dtype throughout.
  std::optional<DType> param_dtype;
  /// Rounds the initial parameters to this dtype (and back) before the master weights are taken
  /// from them, as DeepSpeed's module cast to 16 bits does (EngineOptions::round_initial_parameters):
  /// every parameter on every rank (stage 3: this rank's pieces of those it partitions, before they
  /// are swapped out or copied).
  std::optional<DType> initial_rounding;
  /// With param_dtype: no f32 master weights (DeepSpeed's bf16_master_weights_and_grads with
  /// bf16_optimizer_states). The parameters are rounded to param_dtype when the ZeroOptimizer is
  /// built, and the optimizer steps this rank's param_dtype elements themselves (in f32 arithmetic,
  /// rounded back: optim/optimizer.h), its states in param_dtype too (or f32 with Adam's
  /// fp32_states: DeepSpeed's ZeRO-Offload mode, bf16_optimizer_states false). Model states per
  /// rank, Adam with bf16 states: stage 1 (2+2+4/N) Psi, stage 2 (2+6/N) Psi, stage 3 8/N Psi (half
  /// of DeepSpeed's 16-byte mixed precision at stage 3), at the price of updates rounded to bf16's
  /// 8 significant bits.
  bool master_weights_in_param_dtype = false;
  /// Not a DeepSpeed key. Stage 3: the device the layers are gathered on and computed on when the
  /// model was built on the host (zero.Init's use with offload_param cpu: a model larger than the
  /// GPU is never whole on it): each parameter becomes a tensor of that device holding no memory
  /// until gathered, and the model's other tensors (buffers, parameters the optimizer does not
  /// hold) move there. Empty: where the parameters are.
  std::optional<Device> gather_device;
};

/// ValueError naming the field. Pure.
void validateZeroOptions(const ZeroOptions& options);

class ZeroOptimizer {
 public:
  /// Collective. optimizer's parameters must be parameters of model, all of one dtype (f32 or
  /// f64), dense, and the optimizer must not have stepped yet. Checks that every rank has the same
  /// model and broadcasts rank 0's parameters and buffers. group may be null for one rank.
  ZeroOptimizer(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer,
                std::shared_ptr<comm::ProcessGroup> group, const ZeroOptions& options);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  /// Collective. Steps this rank's partition with the averaged gradients (stage 1: the parameters'
  /// own, averaged by DDP; stages 2 and 3: the reduced pieces) and all-gathers the updated
  /// parameters (stage 3: releases them instead; the next forward gathers them).
  /// grad_scale (not 1 only where fusesHostStep()): every gradient multiplied by it as the update
  /// reads it (the clipping coefficient, Engine's rule with clipCoefficient()).
  void step(double grad_scale = 1.0);
  /// Whether step() fuses the host step's passes (ZeroOptions::fused_host_step): the partition
  /// stepped on the host in f32 by an optimizer that fuses, without NVMe swapping; decided when
  /// the ZeroOptimizer is built, alike on every rank.
  bool fusesHostStep() const;

  /// Stage 3, before a training forward. Collective. Gathers the parameters of no gather unit
  /// (embeddings, final norms: zero/parameter_coordinator.h); each unit's are gathered by its
  /// forward hooks, one unit at a time, prefetching the next. Other stages: nothing to do.
  void beginStep();
  /// Stage 3. Collective unless the parameters are already gathered: every parameter whole (for an
  /// evaluation, a state dict, a checkpoint) until releaseParameters(). Other stages: nothing.
  void gatherParameters();
  /// Stage 3. Collective when prefetches are in flight. The model's parameters are freed again
  /// (each keeps its shape; its data cannot be read until gathered); only the partition stays.
  void releaseParameters();
  /// Stage 3, while gathered (and stages 1 and 2 with offload_optimizer_cpu). Not collective.
  /// Copies this rank's elements of the (gathered, then changed: a loaded checkpoint) parameters
  /// back into its partition, the values stage 3 (the host copies of the offload) trains.
  void adoptGatheredParameters();
  /// Not collective. adoptGatheredParameters for the parameters `indices` (into parameters())
  /// alone: a checkpoint loaded one gathered bucket at a time, never the whole model (stage 3:
  /// with those parameters whole, forEachParameterBucketWhole's bucket). With `values`, this rank's
  /// elements are taken from values(index) (the parameter's whole values, any dtype and device: a
  /// checkpoint's f32 ones) instead of the parameter, and the parameter's elements rounded from
  /// them: so master weights (param_dtype) resume exactly, not from their rounding.
  void adoptParameters(const std::vector<size_t>& indices, const std::function<Tensor(size_t)>& values = {});
  /// Collective at stage 3 (outside a step, parameters not gathered): calls fn with the indices
  /// (into parameters()) of a set of whole parameters at a time, one gathered bucket after
  /// another, until every parameter was passed once; never the whole model in memory (a final
  /// model file written as it streams by). Below stage 3: once, with every index.
  void forEachParameterBucketWhole(const std::function<void(const std::vector<size_t>&)>& fn);
  /// The optimizer's parameters, in its order.
  const std::vector<autograd::Variable>& parameters() const { return params_; }
  /// Whether every parameter of the model is whole now (always, below stage 3).
  bool parametersGathered() const;
  /// Clears the gradients: the parameters' (stage 1) or the partition's (stage 2).
  void zeroGrad();
  /// Collective. Clips the gradients' joint 2-norm across all partitions to max_norm
  /// (clip_grad_norm_ of the whole model); returns the norm before clipping.
  double clipGradNorm(double max_norm);
  /// Collective. The gradients' joint 2-norm across all partitions (clipGradNorm's, without
  /// clipping): non-finite when any rank's gradients hold an inf or a nan (f64 sums of f32 squares
  /// do not overflow), so it is also that check.
  double gradNorm();
  /// Collective. Multiplies the gradients by `factor` and says whether any rank's hold an inf or
  /// nan (the loss scaler's check, agreed by every rank).
  bool unscaleAndCheckOverflow(double factor);

  /// Collective. The optimizer's state as the optimizer would hold it over the whole parameters
  /// (keys "<parameter index>.<name>" shaped like the parameters, groups listing parameter
  /// indices): what DDP's optimizer saves, so a checkpoint holds the same whatever the stage and
  /// world size. root -1: every rank gets all of it; else only rank root does (the others get the
  /// groups and no state, and never hold more than their partition).
  optim::OptimizerStateDict consolidatedStateDict(int root = -1);
  /// Not collective. Loads a whole-parameter state dict (consolidatedStateDict's, or a DDP run's
  /// optimizer's) keeping this rank's partition: resharding to any world size or stage 1/2.
  /// ValueError when the groups or sizes do not match.
  void loadConsolidatedStateDict(const optim::OptimizerStateDict& state);

  /// A run of one parameter's elements that this rank owns (at most one per parameter): what a
  /// partitioned checkpoint saves and loads (train/checkpoint/zero_checkpoint.h).
  struct OwnedSegment {
    size_t param = 0;          // index in the parameter order of consolidatedStateDict (DDP's)
    int64_t param_offset = 0;  // first element within the parameter (flat)
    int64_t numel = 0;
    int64_t opt_index = 0;  // its state in partitionOptimizerState() is "<opt_index>.<key>"
    Tensor values;          // this rank's current elements (stage 3: the partition's own storage)
  };
  /// Not collective. This rank's segments, in partition order.
  std::vector<OwnedSegment> ownedSegments() const;
  /// Not collective. This rank's optimizer state in the optimizer's own numbering (the
  /// segments' opt_index): optimizer()->stateDict(), or with NVMe offload the states read back
  /// from the swap file (the whole partition's states in memory until the result goes).
  optim::OptimizerStateDict partitionOptimizerState() const;
  /// Every parameter's name in the model, shape and the optimizer group's parameters, in the
  /// order of consolidatedStateDict.
  const std::vector<std::string>& parameterNames() const { return names_; }
  const std::vector<Shape>& parameterShapes() const { return shapes_; }
  const std::vector<std::vector<int64_t>>& groupParameters() const { return group_params_; }
  /// Not collective. As loadConsolidatedStateDict, but each tensor "<parameter index>.<name>"
  /// holds only this rank's elements of the parameter (ownedSegments()), or is a scalar ("step"):
  /// what a partitioned checkpoint's loader reads. ValueError when the groups or sizes differ.
  void loadPartitionStateDict(const optim::OptimizerStateDict& state);

  /// The wrapped optimizer (its groups now hold the shard variables).
  const std::shared_ptr<optim::Optimizer>& optimizer() const { return optimizer_; }
  const ZeroLayout& layout() const { return layout_; }
  /// The NVMe offload of the optimizer states (options.offload_optimizer), or nullptr.
  const ZeroNvmeOffload* nvmeOffload() const { return offload_.get(); }
  /// The swap files of the parameter pieces (offload_param nvme) and of the gradient pieces
  /// (stage 3 with offload_optimizer nvme), or nullptr.
  const ZeroPieceSwap* parameterSwap() const;
  const ZeroPieceSwap* gradientSwap() const;
  int stage() const { return options_.stage; }
  /// Whether the parameters are param_dtype with f32 master weights in the partition (false with
  /// master_weights_in_param_dtype: the parameters are their own master weights).
  bool masterWeights() const { return master_; }
  /// Whether the model's parameters are param_dtype (bf16 or f16), with master weights in f32 or
  /// in param_dtype itself.
  bool lowPrecisionParameters() const { return options_.param_dtype.has_value(); }
  /// Stage 3's gathering (zero/parameter_coordinator.h), or nullptr.
  const ZeroParameterCoordinator* coordinator() const { return coordinator_.get(); }
  ZeroParameterCoordinator* coordinator() { return coordinator_.get(); }
  /// This rank's model-state bytes: parameters (all; stage 3: the partition, plus the whole
  /// parameters while they are gathered), gradients (all, or the partition with stage 2 and 3), optimizer
  /// states (the partition's, counted from the optimizer's kind so the report is right before the first step
  /// too).
  ModelStateBytes memory() const;

 private:
  struct Shard {
    autograd::Variable var;  // view of the parameter's elements [param_offset, +numel), or with
                             // offload_optimizer_cpu a host copy of them (with offload_param_cpu
                             // too: the view of the host piece)
    Tensor elements;         // with that host copy: the view it copies (else undefined)
    Tensor host_grad;        // with offload_optimizer_cpu: the host copy of its gradient
    size_t param;
    size_t bucket;
    int64_t param_offset;
    int64_t piece_offset;  // within this rank's piece of the bucket
    int64_t numel;
    int64_t opt_index = 0;  // in the optimizer's state dict
    Tensor upload{};        // ZeRO-Offload of master weights to a GPU: pinned 16-bit staging of the update
  };
  /// The dtype of the optimizer's states of the partition (one for every group): the optimizer's
  /// for the values it steps (f32 master weights, or the parameters). NotSupportedError when the
  /// groups' options disagree.
  DType stateDType() const;
  /// The partition's gradient of s where it is (the reduced piece, or the parameter's own
  /// gradient's elements); undefined when the parameter got none.
  Tensor partitionGradient(const Shard& s) const;
  void pointShardGradients();
  /// The shards' gradients when they are all GPU memory (no ZeRO-Offload host copies, no swapped
  /// pieces): clipping and the loss scaler's check then read one value back, not one per shard.
  /// Empty otherwise.
  std::vector<Tensor> deviceGradients() const;
  /// The shards' gradients unset, and with master weights on the parameters' device their f32
  /// copies freed.
  void dropGradientCopies();
  /// Where the parameters are (stage 3: where they are gathered): the host or one GPU.
  Device device() const { return params_.empty() ? Device::cpu() : params_.front().tensor().device(); }
  /// The gathered parameter's elements into s's values (and ZeRO-Offload's device piece).
  void adoptShard(const Shard& s);
  /// The same from `whole`, the parameter's values held elsewhere.
  void adoptShard(const Shard& s, const Tensor& whole);
  // With offload_optimizer_cpu: the shards' host values from the parameters, and back.
  void copyShardsFromParameters();
  void copyShardsToParameters();
  void copyShardToParameter(Shard& s);
  /// ZeRO-Offload of a GPU run: the host step, a run of shards at a time, each run's updated
  /// values queued for the GPU as soon as it is stepped (copyShardToParameter), while the host
  /// steps the next run.
  void stepAndUpload(double grad_scale);
  /// With fusesHostStep(): where the optimizer writes s's updated values rounded (master weights:
  /// the 16-bit parameter's host view, ZeRO-Offload's upload staging, offload_param's rounded
  /// piece), or undefined when none is written.
  Tensor fusedCopy(Shard& s);
  enum class Pieces { parameters, gradients };
  /// fn(shard) for every shard (with a gradient, for gradients), the swapped pieces of its bucket
  /// (zero/piece_swap.h) in memory meanwhile, one bucket at a time, written back after when
  /// `changes`.
  void forEachShard(Pieces which, bool changes, const std::function<void(const Shard&)>& fn) const;
  void swapPartition();
  void loadStateDictPieces(const optim::OptimizerStateDict& state, bool partition);
  void allgatherParameters();
  /// full[p]: parameter p's elements (in dtype, contiguous), this rank's pieces filled in; fills
  /// in every other rank's pieces. Collective. Every pointer is memory of `where` (the host or the
  /// GPU the parameters are on).
  /// root >= 0: only root receives (a gather); `mine`, when given, says where this rank's elements
  /// of (parameter, offset) are instead of full.
  void gatherPieces(const std::vector<char*>& full, const Device& where, DType dtype, int root = -1,
                    const std::function<const char*(size_t, int64_t)>& mine = {});

  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<comm::ProcessGroup> group_;
  ZeroOptions options_;
  int rank_ = 0;
  int world_ = 1;
  std::vector<autograd::Variable> params_;
  std::vector<std::string> names_;
  ZeroLayout layout_;
  std::vector<Shard> shards_;
  std::vector<size_t> group_of_;                    // parameter -> optimizer group
  std::vector<std::vector<int64_t>> group_params_;  // group -> parameter indices
  std::unique_ptr<ZeroGradReducer> reducer_;
  std::unique_ptr<ZeroNvmeOffload> offload_;  // offload_optimizer device nvme
  Tensor gather_send_, gather_recv_;
  bool offload_cpu_ = false;         // offload_optimizer_cpu (stages 1 and 2)
  bool master_ = false;              // param_dtype: f32 master weights of low-precision parameters
  bool host_grads_current_ = false;  // the shards' host gradients hold this step's (offload)
  bool fuses_host_step_ = false;     // fusesHostStep(), agreed by the ranks when built
  // Stage 3: this rank's pieces of the parameters and their gathering.
  std::unique_ptr<ZeroParameterCoordinator> coordinator_;
  std::vector<Shape> shapes_;
};

}  // namespace lockstep::parallel
