#pragma once
// ZeRO (DeepSpeed's Zero Redundancy Optimizer), stages 1, 2 and 3, for any optimizer that steps flat
// spans (optim/optimizer.h): each of N ranks keeps the optimizer states of 1/N of the parameter
// elements (its partition, zero_partition.h), steps only those, and all-gathers the updated
// parameters. Stage 2 also keeps only its partition of the gradients: they are reduce-scattered
// in buckets while backward runs (zero_grad_reducer.h). Stage 3 reduces gradients as stage 2 and
// keeps only its partition of the parameters too: the shard variables own that storage, and the
// model's parameters hold whole tensors only between gatherParameters() and releaseParameters()
// (the Engine gathers for each forward and releases after its backward).
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
//   // stage 3: zero.gatherParameters() before each forward, zero.releaseParameters() after backward
//
// Not thread-safe. The constructor, step(), clipGradNorm(), unscaleAndCheckOverflow() and (stage 3,
// when released) gatherParameters() are collective; with stages 2 and 3 so is every backward.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/nn/module.h"
#include "lockstep/optim/optimizer.h"
#include "lockstep/parallel/memory_report.h"
#include "lockstep/parallel/zero_grad_reducer.h"
#include "lockstep/parallel/zero_nvme_offload.h"
#include "lockstep/parallel/zero_partition.h"

namespace lockstep::parallel {

/// DeepSpeed's zero_optimization keys that the ZeRO optimizer implements (config.cpp maps the
/// JSON onto this; DeepSpeed's defaults).
struct ZeroOptions {
  /// 1: optimizer states partitioned; 2: and gradients; 3: and parameters (each rank keeps its
  /// partition only; gatherParameters() rebuilds the whole parameters for a forward and backward).
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
  /// offload_optimizer with device nvme: the partition's optimizer states live in a swap file
  /// under nvme_path between steps (zero_nvme_offload.h). Empty nvme_path: in memory.
  NvmeOffloadOptions offload_optimizer{};
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
  /// parameters (stage 3: releases them instead; the next gatherParameters() brings them back).
  void step();

  /// Stage 3. Collective unless the parameters are already gathered: all-gathers every rank's
  /// partition into whole parameter tensors, which the model's parameters then hold (for a forward
  /// and the backward through it, an evaluation, a state dict). Other stages: nothing to do.
  void gatherParameters();
  /// Stage 3. Not collective. The model's parameters drop their whole tensors again (each then
  /// holds an empty tensor of its dtype, shape {0}); only the partition stays. The autograd graph
  /// of a forward keeps what it saved until its backward frees it.
  void releaseParameters();
  /// Stage 3, while gathered. Not collective. Copies this rank's elements of the (gathered, then
  /// changed: a loaded checkpoint) parameters back into its partition, the values stage 3 trains.
  void adoptGatheredParameters();
  /// Whether the model's parameters hold their whole values now (always, below stage 3).
  bool parametersGathered() const { return options_.stage < 3 || gathered_; }
  /// Clears the gradients: the parameters' (stage 1) or the partition's (stage 2).
  void zeroGrad();
  /// Collective. Clips the gradients' joint 2-norm across all partitions to max_norm
  /// (clip_grad_norm_ of the whole model); returns the norm before clipping.
  double clipGradNorm(double max_norm);
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

  /// The wrapped optimizer (its groups now hold the shard variables).
  const std::shared_ptr<optim::Optimizer>& optimizer() const { return optimizer_; }
  const ZeroLayout& layout() const { return layout_; }
  /// The NVMe offload of the optimizer states (options.offload_optimizer), or nullptr.
  const ZeroNvmeOffload* nvmeOffload() const { return offload_.get(); }
  int stage() const { return options_.stage; }
  /// This rank's model-state bytes: parameters (all; stage 3: the partition, plus the whole
  /// parameters while they are gathered), gradients (all, or the partition with stage 2 and 3), optimizer
  /// states (the partition's, counted from the optimizer's kind so the report is right before the first step
  /// too).
  ModelStateBytes memory() const;

 private:
  struct Shard {
    autograd::Variable var;  // view of the parameter's elements [param_offset, +numel)
    size_t param;
    size_t bucket;
    int64_t param_offset;
    int64_t piece_offset;  // within this rank's piece of the bucket
    int64_t numel;
    int64_t opt_index = 0;  // in the optimizer's state dict
  };
  void pointShardGradients();
  void allgatherParameters();
  /// full[p]: parameter p's elements (its dtype, contiguous), this rank's pieces filled in; fills
  /// in every other rank's pieces. Collective.
  /// root >= 0: only root receives (a gather); `mine`, when given, says where this rank's elements
  /// of (parameter, offset) are instead of full.
  void gatherPieces(const std::vector<char*>& full, int root = -1,
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
  // Stage 3: this rank's piece of each bucket's parameters (the shards are views of these), the
  // parameters' shapes, and whether the model's parameters hold their whole values now.
  std::vector<Tensor> param_pieces_;
  std::vector<Shape> shapes_;
  bool gathered_ = true;
};

}  // namespace lockstep::parallel
