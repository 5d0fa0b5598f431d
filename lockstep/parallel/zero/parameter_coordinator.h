#pragma once
// ZeRO stage 3's parameters (DeepSpeed's PartitionedParameterCoordinator, PyTorch FSDP's units):
// each rank keeps only its partition of the parameters (one piece per bucket, zero/partition.h),
// and the whole parameters exist only while something uses them.
//
// The model's layers (Module::layers(): a Sequential's modules, a language model's transformer
// blocks; outermost ones, those with parameters) are the gather units; the parameters of no unit
// (embeddings, final norms, the tied output layer, any model without layers) form the root. The
// buckets are planned per unit (planZeroBuckets), so gathering a unit is one all-gather per bucket
// of its own parameters:
//   - beginStep() gathers the root for a forward and its backward;
//   - a unit's forward pre-hook gathers it (waiting for its prefetch) and prefetches the next unit;
//     its forward hook frees it again and passes the output through a node whose backward gathers
//     it once more (prefetching the unit before it) just before the unit's own backward runs;
//   - "next" is the recorded execution order (DeepSpeed's trace): each training step records the
//     order its units were gathered in (forward, backward, recomputations), and the next step
//     prefetches the units that followed in that order. The first step, and a step from the
//     point it leaves the recorded order, fall back to the layers' order (forward, and reversed
//     in backward);
//   - once every parameter of a unit has its gradient, the unit is freed again;
//   - endStep() waits for what is in flight and frees everything.
// A parameter tensor keeps its shape and Storage throughout; "freed" is Storage::release(), so the
// tensors autograd saved in forward see the gathered values again in backward. A freed
// parameter's data cannot be read (Tensor::dataPtr() says so): a model that reads a unit's
// parameter outside that unit's forward (weights tied across layers) must not rely on units.
//
// gatherAll() makes every parameter whole until endStep() (evaluation, state dicts, checkpoints):
// the hooks do nothing meanwhile.
//
// On a GPU the pieces, the gathered parameters and the gather buffers are GPU memory (copies and
// collectives on the current stream; a freed parameter's memory goes back to the device's caching
// allocator, stream-ordered). With offload_param cpu (ZeRO-Offload of stage 3) the pieces are host
// memory instead (pinned with its pin_memory): a gather copies the piece into a GPU send buffer
// first (one rank: into the parameters), and the GPU holds only whole parameters in use. Those
// copies and the gather behind them go on a side stream (tensor_comm.h's forkSidePlace), so that
// a prefetch overlaps the compute queued meanwhile; the compute stream waits for them when the
// unit is used. The host pieces are what the optimizer
// steps there (ZeroOptimizer's shards view them); it waits for the gathers' copies first.
//
// Not thread-safe; collective in the same order on every rank (every rank runs the same forward
// and backward).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/autograd/variable.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/nn/module.h"
#include "lockstep/parallel/zero/optimizer.h"
#include "lockstep/parallel/zero/partition.h"
#include "lockstep/parallel/zero/piece_swap.h"

namespace lockstep::parallel {

/// The units of `model`: each outermost layer (Module::layers()) that holds a parameter, in
/// forward order.
std::vector<nn::Module*> zeroGatherUnits(nn::Module& model);

struct ZeroBucketPlan {
  /// Parameter indices per bucket, in the order backward completes them: the last unit's buckets
  /// first, the root's last. Each parameter exactly once.
  std::vector<std::vector<size_t>> buckets;
  /// The units (zeroGatherUnits' order) and, per unit, the buckets holding any of its parameters.
  std::vector<nn::Module*> units;
  std::vector<std::vector<size_t>> unit_buckets;
  /// The buckets of the root: the parameters of no unit and the persistent ones.
  std::vector<size_t> root_buckets;
};

/// Buckets for the parameters `params` of model: a unit's buckets hold only its parameters, each
/// at most bucket_elements unless one parameter is larger; parameters of at most
/// persistence_threshold elements go to the root. Pure given the model's structure.
ZeroBucketPlan planZeroBuckets(nn::Module& model, const std::vector<autograd::Variable>& params,
                               int64_t bucket_elements, int64_t persistence_threshold = 0);

class ZeroParameterCoordinator {
 public:
  /// Collective (world > 1). Takes this rank's pieces of rank 0's params (broadcast one bucket at
  /// a time) and frees the parameters. params: one floating dtype, contiguous; layout from
  /// plan.buckets. group may be null for one rank. From options: allgather_partitions (false: one broadcast
  /// per rank), prefetch_bucket_size, max_live_parameters, max_reuse_distance.
  ZeroParameterCoordinator(std::vector<autograd::Variable> params, ZeroLayout layout, ZeroBucketPlan plan,
                           std::shared_ptr<comm::ProcessGroup> group, const ZeroOptions& options);
  ~ZeroParameterCoordinator();
  ZeroParameterCoordinator(const ZeroParameterCoordinator&) = delete;
  ZeroParameterCoordinator& operator=(const ZeroParameterCoordinator&) = delete;

  /// This rank's piece of bucket b (the values stage 3 trains; the optimizer's shards view it).
  Tensor& piece(size_t b) { return pieces_[b]; }
  /// Where the pieces are: the parameters' device, or the host with offload_param cpu.
  const Device& pieceDevice() const { return piece_device_; }
  /// Where the parameters are gathered.
  const Device& device() const { return device_; }
  /// Whether the pieces are not where the parameters are gathered (offload_param: the host), so
  /// the host must wait for the gathers' copies before writing them.
  bool piecesOffDevice() const { return piece_device_ != device_; }
  /// Collective. The root's parameters whole, the units' gathered by their hooks.
  void beginStep();
  /// Collective unless already all whole. Every parameter whole until endStep().
  void gatherAll();
  /// Collective when prefetches are in flight (waits for them). Frees every parameter.
  void endStep();
  /// Collective; outside a step. Makes one bucket after another whole (the next one's gather in
  /// flight meanwhile), calls fn with its parameter indices and frees it again: at most two
  /// buckets resident, never the whole model. Every rank gathers every bucket even when fn threw on
  /// it (rethrown at the end), so the ranks stay in step.
  void forEachBucketWhole(const std::function<void(const std::vector<size_t>&)>& fn);
  /// Whether every parameter is whole now (gatherAll() since the last endStep()).
  bool allGathered() const { return mode_ == Mode::all; }
  /// Bytes of whole parameters resident now plus this rank's pieces.
  int64_t residentBytes() const;
  /// Unit gathers (forward, backward and recomputation) so far, and of those the ones whose
  /// parameters were already fetched or on their way (prefetched, or kept for reuse).
  /// peak_live: the most whole parameter elements resident or in flight at once since the last
  /// resetPeakLive() (or the start).
  struct FetchStats {
    int64_t unit_gathers = 0;
    int64_t ready = 0;
    int64_t peak_live = 0;
  };
  const FetchStats& fetchStats() const { return fetch_stats_; }
  void resetPeakLive() { fetch_stats_.peak_live = live_; }

  /// Piece b in memory (with its values) until the matching releasePiece(); without a swap file
  /// both do nothing. changed: write the piece back (the optimizer stepped it).
  void acquirePiece(size_t b);
  void releasePiece(size_t b, bool changed);
  const ZeroPieceSwap* pieceSwap() const { return swap_.get(); }
  /// offload_param with master weights: rounds every f32 host piece into the param_dtype copy the
  /// gathers send. The optimizer calls it after changing the pieces (its step, a loaded checkpoint),
  /// with no gather's copy in flight. Otherwise nothing to do.
  void roundPieces();
  /// roundPieces for bucket b alone (its piece changed, no gather of it in flight).
  void roundPiece(size_t b);
  /// Bucket b's rounded copy (the fused host step writes it as it steps the piece), or undefined
  /// without one.
  Tensor roundedPiece(size_t b) const { return b < rounded_.size() ? rounded_[b] : Tensor(); }
  /// Bytes of those rounded copies (host memory).
  int64_t roundedBytes() const {
    int64_t n = 0;
    for (const Tensor& t : rounded_) n += static_cast<int64_t>(t.nbytes());
    return n;
  }

  /// fn runs as each unit's backward begins, before its gradients are made (the optimizer's gradient
  /// path finishes older reductions there).
  void setBeforeUnitBackward(std::function<void()> fn) { before_unit_backward_ = std::move(fn); }

  /// Hook bodies (public for the backward node).
  void acquireUnit(size_t unit, bool backward);

 private:
  enum class Mode { released, step, all };
  enum class State { released, in_flight, resident };
  struct Fetch {
    Tensor send, recv;
    std::vector<std::shared_ptr<comm::Work>> works;
    bool side = false;        // the copies and the gather went on a side stream (offload_param)
    comm::BufferPlace place;  // where they went
  };
  /// offload_param nvme: the pieces live in a swap file (IoError naming the key when it cannot be
  /// made on any rank; ValueError when a piece is larger than buffer_size elements). On a GPU run
  /// a piece read back is host memory, copied to the GPU for its gather and freed once the copy
  /// is done.
  void swapPieces();
  /// What a gather of bucket b sends: its piece, or (offload_param with master weights) the
  /// piece's rounding kept beside it.
  const Tensor& source(size_t b) const;
  /// Piece b's values into to's elements [at, at + piece size) (a send or receive buffer, or a
  /// bucket's flat parameters): a copy on place's stream, or rounded to to's dtype when that is
  /// param_dtype (on the current stream; place must be the current one then).
  void copyPiece(size_t b, const Tensor& to, int64_t at, const comm::BufferPlace& place);
  void launch(size_t bucket);
  /// launch's copies and collectives; it undoes the bucket's state when they throw.
  void startFetch(size_t bucket);
  void complete(size_t bucket);
  void acquire(size_t bucket);
  void releaseBucket(size_t bucket);
  void releaseUnit(size_t unit);
  void prefetchUnit(size_t unit);
  void onGradReady(size_t param);
  autograd::Variable afterForward(size_t unit, const autograd::Variable& out);

  std::vector<autograd::Variable> params_;
  std::vector<Shape> shapes_;
  ZeroLayout layout_;
  ZeroBucketPlan plan_;
  std::shared_ptr<comm::ProcessGroup> group_;
  ZeroOptions options_;
  int rank_ = 0;
  int world_ = 1;
  Device device_;                    // the parameters' and the gather buffers' (the host or one GPU)
  Device piece_device_;              // the pieces': device_, or the host with offload_param cpu
  DType gather_dtype_ = DType::f32;  // the whole parameters': the pieces', or param_dtype
  std::vector<Tensor> pieces_;
  std::vector<Tensor> rounded_;          // offload_param with master weights: pieces_ in param_dtype
  std::unique_ptr<ZeroPieceSwap> swap_;  // offload_param nvme
  std::vector<Tensor> flat_;             // per bucket: its parameters' storage when its pieces are equal
  std::vector<State> state_;
  std::vector<Fetch> fetch_;
  std::vector<int> holders_;  // per bucket: active units (and the root) using it
  std::vector<bool> unit_active_;
  std::vector<std::vector<size_t>> units_of_param_;
  std::vector<size_t> unit_grad_params_;  // per unit: parameters whose gradients it waits for
  std::vector<size_t> unit_pending_;      // per unit: those not ready yet in this backward
  std::vector<int64_t> unit_numel_;
  int64_t live_ = 0;  // whole parameter elements resident or in flight
  std::vector<size_t> hook_ids_, grad_hook_ids_;
  std::function<void()> before_unit_backward_;
  // The recorded execution order: the last training step's unit gathers (trace_), this step's so
  // far (recording_), and where this step is in trace_ while it follows it.
  struct TraceEvent {
    size_t unit;
    bool backward;
    bool operator==(const TraceEvent&) const = default;
  };
  std::vector<TraceEvent> trace_, recording_;
  size_t trace_pos_ = 0;
  bool on_trace_ = false;
  FetchStats fetch_stats_;
  /// Prefetches the units after event `at` of trace_, within the budget and the live limit.
  void prefetchByTrace(size_t at);
  Mode mode_ = Mode::released;
  bool in_backward_ = false;
};

}  // namespace lockstep::parallel
