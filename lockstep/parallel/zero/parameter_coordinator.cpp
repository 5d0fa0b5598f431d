#include "lockstep/parallel/zero/parameter_coordinator.h"

#include <algorithm>
#include <exception>
#include <set>
#include <unordered_map>

#include "lockstep/autograd/function.h"
#include "lockstep/parallel/ddp/bucket_assignment.h"
#include "lockstep/parallel/precision.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/util/error.h"

namespace lockstep::parallel {

using autograd::Variable;

namespace {

bool holdsParameters(nn::Module& m) { return !m.parameters().empty(); }

void collectUnits(nn::Module& m, std::set<nn::Module*>& seen, std::vector<nn::Module*>& units) {
  if (seen.count(&m)) return;
  for (nn::Module* layer : m.layers()) {
    if (layer && holdsParameters(*layer) && seen.insert(layer).second) units.push_back(layer);
  }
  for (const auto& child : m.children()) collectUnits(*child, seen, units);
}

// Passes a unit's output through unchanged; its backward gathers the unit again just before the
// unit's own backward nodes run (they consume this node's gradient).
class GatherForBackward final : public autograd::Node {
 public:
  GatherForBackward(ZeroParameterCoordinator* coordinator, size_t unit)
      : coordinator_(coordinator), unit_(unit) {}
  std::vector<Tensor> apply(const Tensor& gy) override {
    coordinator_->acquireUnit(unit_, true);
    return {gy};
  }
  std::string name() const override { return "ZeroGatherForBackward"; }

 private:
  ZeroParameterCoordinator* coordinator_;
  size_t unit_;
};

}  // namespace

std::vector<nn::Module*> zeroGatherUnits(nn::Module& model) {
  std::set<nn::Module*> seen;
  std::vector<nn::Module*> units;
  collectUnits(model, seen, units);
  return units;
}

ZeroBucketPlan planZeroBuckets(nn::Module& model, const std::vector<Variable>& params,
                               int64_t bucket_elements, int64_t persistence_threshold) {
  ZeroBucketPlan plan;
  plan.units = zeroGatherUnits(model);
  std::unordered_map<const autograd::VariableImpl*, size_t> index;
  for (size_t p = 0; p < params.size(); ++p) index.emplace(params[p].impl().get(), p);
  // Persistent parameters are left to the root.
  std::vector<bool> placed(params.size(), false);
  auto persistent = [&](size_t p) { return params[p].numel() <= persistence_threshold; };
  std::vector<size_t> bucket_of(params.size(), 0);
  BucketAssignmentOptions bo;
  bo.bucket_bytes = bo.first_bucket_bytes = static_cast<size_t>(std::max<int64_t>(1, bucket_elements));
  // Buckets of a list of parameter indices (assignBuckets' order: the backward order).
  auto add = [&](const std::vector<size_t>& members) {
    std::vector<size_t> numels;
    std::vector<DType> dtypes;
    for (size_t p : members) {
      numels.push_back(static_cast<size_t>(params[p].numel()));
      dtypes.push_back(params[p].dtype());
    }
    for (const auto& b : assignBuckets(numels, dtypes, bo)) {
      std::vector<size_t> bucket;
      for (size_t i : b) bucket.push_back(members[i]);
      for (size_t p : bucket) bucket_of[p] = plan.buckets.size();
      plan.buckets.push_back(std::move(bucket));
    }
  };
  std::vector<std::vector<size_t>> unit_params(plan.units.size());
  for (size_t u = 0; u < plan.units.size(); ++u) {
    for (const Variable& v : plan.units[u]->parameters()) {
      auto it = index.find(v.impl().get());
      if (it != index.end()) unit_params[u].push_back(it->second);
    }
  }
  for (size_t u = plan.units.size(); u-- > 0;) {  // the last unit's gradients come first
    std::vector<size_t> members;
    for (size_t p : unit_params[u]) {
      if (!placed[p] && !persistent(p)) members.push_back(p);
      placed[p] = placed[p] || !persistent(p);
    }
    if (!members.empty()) add(members);
  }
  std::vector<size_t> root;
  for (size_t p = 0; p < params.size(); ++p) {
    if (!placed[p]) root.push_back(p);
  }
  const size_t first_root = plan.buckets.size();
  if (!root.empty()) add(root);
  for (size_t b = first_root; b < plan.buckets.size(); ++b) plan.root_buckets.push_back(b);
  for (const auto& members : unit_params) {
    std::set<size_t> buckets;
    for (size_t p : members) {
      if (!persistent(p)) buckets.insert(bucket_of[p]);
    }
    plan.unit_buckets.emplace_back(buckets.begin(), buckets.end());
  }
  return plan;
}

ZeroParameterCoordinator::ZeroParameterCoordinator(std::vector<Variable> params, ZeroLayout layout,
                                                   ZeroBucketPlan plan,
                                                   std::shared_ptr<comm::ProcessGroup> group,
                                                   const ZeroOptions& options)
    : params_(std::move(params)),
      layout_(std::move(layout)),
      plan_(std::move(plan)),
      group_(std::move(group)),
      options_(options) {
  rank_ = group_ ? group_->rank() : 0;
  world_ = group_ ? group_->size() : 1;
  LOCKSTEP_CHECK(layout_.world == world_ && layout_.buckets.size() == plan_.buckets.size());
  autograd::NoGradGuard ng;
  const DType dtype = params_.empty() ? DType::f32 : params_.front().dtype();
  const size_t elem = dtypeSize(dtype);
  // Master weights (param_dtype): the pieces keep the f32 values the optimizer steps; the whole
  // parameters, the gathers and so the gradients are in param_dtype, rounded from the pieces.
  gather_dtype_ = options_.param_dtype.value_or(dtype);
  const Device built_on = params_.empty() ? Device::cpu() : params_.front().tensor().device();
  for (const Variable& p : params_) {
    shapes_.push_back(p.shape());
    LOCKSTEP_ENFORCE(p.tensor().device() == built_on, ValueError,
                     "ZeRO stage 3: a rank's parameters must share one device; they are on ",
                     deviceName(built_on), " and ", deviceName(p.tensor().device()));
  }
  // Built on the host and gathered on a GPU (options.gather_device): the pieces are taken from the
  // host values, and each parameter becomes a GPU tensor holding no memory until gathered.
  device_ = options_.gather_device.value_or(built_on);
  LOCKSTEP_ENFORCE(device_ == built_on || built_on.isCpu(), ValueError, "ZeRO stage 3: parameters on ",
                   deviceName(built_on), " cannot be gathered on ", deviceName(device_),
                   "; build the model on the host or on that device");
  // offload_param cpu: the pieces in host memory (pinned for a GPU's direct copies), the whole
  // parameters on their device; offload_param nvme: host memory while in use, else the swap file.
  const bool nvme = !options_.offload_param_nvme_path.empty();
  piece_device_ = options_.offload_param_cpu || nvme ? Device::cpu() : device_;
  const bool pin = piece_device_ != device_ && options_.offload_param_pin_memory && !nvme;
  for (const ZeroBucket& bucket : layout_.buckets) {
    Tensor piece = Tensor::empty({bucket.pieceSize(rank_)}, dtype, MemoryFormat::contiguous, piece_device_);
    pieces_.push_back(pin ? piece.pinMemory() : piece);
  }
  if (!options_.offload_param_nvme_path.empty()) swapPieces();
  // One bucket at a time: rank 0's values of its parameters (broadcast, as DDP starts), this rank's
  // piece of them, and the whole parameters replaced by freed storage of their own. So a model
  // built under zero.Init (zero/init.h) or too large to copy is never whole in memory here.
  //
  // A bucket whose pieces are all equally long is one flat tensor, laid out as its all-gather
  // leaves it: its parameters are views into it and the all-gather writes straight into them.
  // Elsewhere each parameter gets storage of its own (filled by copies out of a receive buffer).
  // Either way freeing a bucket frees nothing else.
  flat_.resize(layout_.buckets.size());
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    const ZeroBucket& bucket = layout_.buckets[b];
    if (group_ && world_ > 1) {
      for (size_t p : bucket.params) {
        LOCKSTEP_CHECK(params_[p].tensor().isContiguous(), "ZeRO stage 3: parameter ", p,
                       " is not contiguous");
        broadcast(*group_, params_[p].tensor(), 0);
      }
    }
    if (swap_) swap_->acquire(b, /*contents=*/false);  // every element is written below
    Tensor& piece = pieces_[b];
    // Where the copies run: the GPU's stream when either side is GPU memory.
    const comm::BufferPlace place = placeOf(piece_device_ != Device::cpu() ? piece_device_ : built_on);
    for (const ZeroSegment& s : segmentsIn(bucket, bucket.piece[rank_], bucket.piece[rank_ + 1])) {
      const Tensor& src = params_[s.param].tensor();
      copyBytes(static_cast<char*>(piece.devicePtr()) + (s.bucket_offset - bucket.piece[rank_]) * elem,
                static_cast<const char*>(src.devicePtr()) + s.param_offset * elem, s.numel * elem, place);
    }
    // DeepSpeed's module cast to 16 bits (ZeroOptions::initial_rounding): the piece starts rounded,
    // before it is written out to its swap file or copied for the optimizer.
    if (options_.initial_rounding) {
      if (piece_device_ != built_on) waitForCopies(place);
      roundInPlace({piece}, *options_.initial_rounding);
    }
    if (swap_ && piece_device_ != built_on) waitForCopies(place);  // written out next
    releasePiece(b, true);
    const bool direct = bucket.numel > 0 && bucket.chunk * world_ == bucket.numel;
    if (direct) flat_[b] = Tensor::empty({bucket.numel}, gather_dtype_, MemoryFormat::contiguous, device_);
    for (size_t i = 0; i < bucket.params.size(); ++i) {
      Variable& p = params_[bucket.params[i]];
      p.tensor() = direct ? flat_[b].narrow(0, bucket.param_offset[i], p.numel()).view(p.shape())
                          : Tensor::empty(p.shape(), gather_dtype_, MemoryFormat::contiguous, device_);
      if (!direct) p.tensor().storage()->release();
    }
    if (direct) flat_[b].storage()->release();
  }
  // Host pieces filled from GPU parameters: the host reads them next (the optimizer's step).
  if (piece_device_ != built_on) waitForCopies(placeOf(piece_device_.isCpu() ? built_on : piece_device_));
  // offload_param with master weights: beside each f32 host piece its rounding in param_dtype
  // (pinned for a GPU), what the gathers copy up without waiting (DeepSpeed keeps such a 16-bit
  // partition on the host too); rounded again whenever the pieces change (roundPieces()).
  if (options_.offload_param_cpu && gather_dtype_ != dtype && !swap_) {
    for (const Tensor& piece : pieces_) {
      Tensor low = Tensor::empty({piece.numel()}, gather_dtype_);
      rounded_.push_back(pin ? low.pinMemory() : low);
    }
    roundPieces();
  }
  const size_t nb = layout_.buckets.size();
  state_.assign(nb, State::released);
  fetch_.resize(nb);
  holders_.assign(nb, 0);
  unit_active_.assign(plan_.units.size(), false);
  units_of_param_.resize(params_.size());
  unit_grad_params_.assign(plan_.units.size(), 0);
  unit_pending_.assign(plan_.units.size(), 0);
  unit_numel_.assign(plan_.units.size(), 0);
  for (size_t u = 0; u < plan_.units.size(); ++u) {
    for (size_t b : plan_.unit_buckets[u]) unit_numel_[u] += layout_.buckets[b].numel;
    std::set<const autograd::VariableImpl*> mine;
    for (const Variable& v : plan_.units[u]->parameters()) mine.insert(v.impl().get());
    for (size_t p = 0; p < params_.size(); ++p) {
      if (!mine.count(params_[p].impl().get())) continue;
      units_of_param_[p].push_back(u);
      if (params_[p].requiresGrad()) ++unit_grad_params_[u];
    }
    hook_ids_.push_back(plan_.units[u]->registerForwardHooks(
        [this, u](nn::Module&) { acquireUnit(u, false); },
        [this, u](nn::Module&, const Variable& out) { return afterForward(u, out); }));
  }
  for (size_t p = 0; p < params_.size(); ++p) {
    grad_hook_ids_.push_back(params_[p].registerGradReadyHook([this, p](Variable&) { onGradReady(p); }));
  }
}

ZeroParameterCoordinator::~ZeroParameterCoordinator() {
  for (size_t u = 0; u < plan_.units.size(); ++u) plan_.units[u]->removeForwardHooks(hook_ids_[u]);
  for (size_t p = 0; p < params_.size(); ++p) params_[p].removeGradReadyHook(grad_hook_ids_[p]);
  for (size_t b = 0; b < fetch_.size(); ++b) {
    try {
      for (auto& w : fetch_[b].works) w->wait();
    } catch (...) {  // a failed group: nothing left to wait for
    }
    try {
      if (fetch_[b].side) waitForCopies(fetch_[b].place);  // side copies read host pieces about to be freed
    } catch (...) {
    }
  }
}

void ZeroParameterCoordinator::swapPieces() {
  const int64_t buffer_size = options_.offload_param_buffer_size;
  std::exception_ptr failed;
  try {
    for (size_t b = 0; b < pieces_.size(); ++b) {
      LOCKSTEP_ENFORCE(pieces_[b].numel() <= buffer_size, ValueError,
                       "zero_optimization.offload_param.buffer_size=", buffer_size, " is smaller than rank ",
                       rank_, "'s piece of parameter bucket ", b, " (", pieces_[b].numel(),
                       " elements): raise buffer_size to at least that, or lower reduce_bucket_size (a piece "
                       "is a bucket's share of one rank; a parameter larger than the bucket size is a bucket "
                       "of its own)");
    }
    swap_ = std::make_unique<ZeroPieceSwap>(pieces_, options_.offload_param_nvme_path,
                                            "lockstep-zero-parameters-rank" + std::to_string(rank_),
                                            "zero_optimization.offload_param.nvme_path", /*zeros=*/true);
  } catch (const Error&) {
    failed = std::current_exception();
  }
  // Every rank learns whether any could not make its swap file before the broadcasts start.
  rethrowIfAnyRankFailed(group_.get(), failed,
                         "ZeRO NVMe offload: another rank could not create its swap file under " +
                             options_.offload_param_nvme_path + " (its log says why)");
}

void ZeroParameterCoordinator::acquirePiece(size_t b) {
  if (swap_) swap_->acquire(b);
}

void ZeroParameterCoordinator::releasePiece(size_t b, bool changed) {
  if (swap_) swap_->release(b, changed);
}

void ZeroParameterCoordinator::launch(size_t b) {
  if (state_[b] != State::released) return;
  const ZeroBucket& bucket = layout_.buckets[b];
  state_[b] = State::in_flight;
  acquirePiece(b);  // read back from the swap file (offload_param nvme) until complete()
  live_ += bucket.numel;
  fetch_stats_.peak_live = std::max(fetch_stats_.peak_live, live_);
  try {
    startFetch(b);
  } catch (...) {  // out of memory, a failed group: the bucket is released again, nothing in flight
    Fetch& f = fetch_[b];
    try {
      if (f.side) waitForCopies(f.place);  // copies queued before the failure still use the buffers
    } catch (...) {
    }
    f = Fetch{};
    if (flat_[b].defined()) {
      flat_[b].storage()->release();
    } else {
      for (size_t p : bucket.params) params_[p].tensor().storage()->release();
    }
    state_[b] = State::released;
    live_ -= bucket.numel;
    releasePiece(b, false);
    throw;
  }
}

void ZeroParameterCoordinator::startFetch(size_t b) {
  const ZeroBucket& bucket = layout_.buckets[b];
  const bool direct = flat_[b].defined();
  if (direct) flat_[b].storage()->materialize();
  const DType dtype = gather_dtype_;
  const size_t elem = dtypeSize(dtype);
  Fetch& f = fetch_[b];
  // offload_param: the piece is host memory. Its copy up and the gather behind it go on a side
  // stream, so that the compute queued meanwhile (this unit's, when the gather is a prefetch) does
  // not wait for them; complete() makes the compute stream wait for them instead.
  const bool side = piece_device_ != device_ && device_.isCuda() && source(b).dtype() == dtype;
  if (world_ == 1) {
    if (!side) return;  // complete() copies the piece
    if (!direct) {
      for (size_t p : bucket.params) params_[p].tensor().storage()->materialize();
    }
    f.place = forkSidePlace(placeOf(device_), SideLane::to_device);  // after the allocations
    f.side = true;
    if (direct) {
      copyPiece(b, flat_[b], 0, f.place);
    } else {
      const char* from = static_cast<const char*>(source(b).devicePtr());
      for (const ZeroSegment& s : segmentsIn(bucket, bucket.piece[0], bucket.piece[1])) {
        copyBytes(static_cast<char*>(params_[s.param].tensor().devicePtr()) + s.param_offset * elem,
                  from + (s.bucket_offset - bucket.piece[0]) * elem, s.numel * elem, f.place);
      }
    }
    return;
  }
  if (!direct) f.recv = Tensor::empty({bucket.chunk * world_}, dtype, MemoryFormat::contiguous, device_);
  char* recv = static_cast<char*>(direct ? flat_[b].devicePtr() : f.recv.devicePtr());
  const void* send = source(b).devicePtr();  // as long as the block when the pieces are equal
  // Padded, (offload_param) copied to the device, or (master weights) rounded: a send buffer.
  const bool staged = !direct || piece_device_ != device_ || source(b).dtype() != dtype;
  if (options_.allgather_partitions && staged) {
    f.send = direct ? Tensor::empty({bucket.chunk}, dtype, MemoryFormat::contiguous, device_)
                    : Tensor::zeros({bucket.chunk}, dtype, device_);
  }
  // After the allocations, which the side stream's work then follows.
  f.place = side ? forkSidePlace(placeOf(device_), SideLane::to_device) : placeOf(device_);
  f.side = side;
  if (options_.allgather_partitions) {
    if (staged) {
      copyPiece(b, f.send, 0, f.place);
      send = f.send.devicePtr();
    }
    comm::AllgatherOptions ao;
    ao.place = f.place;
    f.works.push_back(group_->allgather(send, recv, static_cast<size_t>(bucket.chunk), dtype, ao));
  } else {  // one broadcast per rank, each from that rank's block
    copyPiece(b, direct ? flat_[b] : f.recv, rank_ * bucket.chunk, f.place);
    for (int r = 0; r < world_; ++r) {
      comm::BroadcastOptions bo;
      bo.root = r;
      bo.place = f.place;
      f.works.push_back(
          group_->broadcast(recv + r * bucket.chunk * elem, static_cast<size_t>(bucket.chunk), dtype, bo));
    }
  }
}

const Tensor& ZeroParameterCoordinator::source(size_t b) const {
  return rounded_.empty() ? pieces_[b] : rounded_[b];
}

void ZeroParameterCoordinator::roundPieces() {
  for (size_t b = 0; b < rounded_.size(); ++b) roundPiece(b);
}

void ZeroParameterCoordinator::roundPiece(size_t b) {
  if (b < rounded_.size()) rounded_[b].copyFrom(pieces_[b]);
}

void ZeroParameterCoordinator::copyPiece(size_t b, const Tensor& to, int64_t at,
                                         const comm::BufferPlace& place) {
  const Tensor& piece = source(b);
  if (piece.dtype() == to.dtype()) {
    copyBytes(static_cast<char*>(to.devicePtr()) + at * dtypeSize(to.dtype()), piece.devicePtr(),
              piece.nbytes(), place);
    return;
  }
  // Rounded on the way (on either device), on the current stream: never a side stream's copy.
  LOCKSTEP_CHECK(place.stream == placeOf(device_).stream, "ZeRO stage 3: a rounding copy on a side stream");
  to.narrow(0, at, piece.numel()).copyFrom(piece);
}

void ZeroParameterCoordinator::complete(size_t b) {
  if (state_[b] != State::in_flight) return;
  Fetch& f = fetch_[b];
  for (auto& w : f.works) w->wait();
  const ZeroBucket& bucket = layout_.buckets[b];
  const size_t elem = dtypeSize(gather_dtype_);
  const comm::BufferPlace place = placeOf(device_);
  // The side stream's copies and gather (offload_param) are done before what is queued next here.
  if (f.side) joinSidePlace(place, f.place);
  if (f.side && world_ == 1) {  // launch() copied the piece into the parameters
    f = Fetch{};
    state_[b] = State::resident;
    if (swap_) waitForCopies(place);  // the copies read the piece's memory
    releasePiece(b, false);
    return;
  }
  if (flat_[b].defined()) {  // the all-gather wrote the parameters; one rank copies its piece
    if (world_ == 1) copyPiece(b, flat_[b], 0, place);
    f = Fetch{};
    state_[b] = State::resident;
    if (swap_ && piece_device_ != device_) waitForCopies(place);  // the copies read the piece's memory
    releasePiece(b, false);
    return;
  }
  for (size_t p : bucket.params) params_[p].tensor().storage()->materialize();
  for (int r = 0; r < world_; ++r) {
    if (r == rank_ && source(b).dtype() != gather_dtype_) {  // this rank's piece, rounded
      for (const ZeroSegment& s : segmentsIn(bucket, bucket.piece[r], bucket.piece[r + 1])) {
        Tensor to =
            params_[s.param].tensor().view({params_[s.param].numel()}).narrow(0, s.param_offset, s.numel);
        to.copyFrom(pieces_[b].narrow(0, s.bucket_offset - bucket.piece[r], s.numel));
      }
      continue;
    }
    // This rank's elements from its piece, or (offload_param: the piece is host memory) from its
    // block of the gather, already on the device.
    const char* from = r == rank_ && !f.side
                           ? static_cast<const char*>(source(b).devicePtr())
                           : static_cast<const char*>(f.recv.devicePtr()) + r * bucket.chunk * elem;
    for (const ZeroSegment& s : segmentsIn(bucket, bucket.piece[r], bucket.piece[r + 1])) {
      copyBytes(static_cast<char*>(params_[s.param].tensor().devicePtr()) + s.param_offset * elem,
                from + (s.bucket_offset - bucket.piece[r]) * elem, s.numel * elem, place);
    }
  }
  f = Fetch{};
  state_[b] = State::resident;
  if (swap_ && piece_device_ != device_) waitForCopies(place);
  releasePiece(b, false);
}

void ZeroParameterCoordinator::acquire(size_t b) {
  launch(b);
  complete(b);
}

void ZeroParameterCoordinator::releaseBucket(size_t b) {
  if (state_[b] == State::in_flight) complete(b);  // a collective must finish on every rank
  if (state_[b] != State::resident) return;
  if (flat_[b].defined()) {
    flat_[b].storage()->release();
  } else {
    for (size_t p : layout_.buckets[b].params) params_[p].tensor().storage()->release();
  }
  state_[b] = State::released;
  live_ -= layout_.buckets[b].numel;
}

void ZeroParameterCoordinator::beginStep() {
  if (mode_ != Mode::released) return;
  mode_ = Mode::step;
  in_backward_ = false;
  recording_.clear();
  trace_pos_ = 0;
  on_trace_ = !trace_.empty();
  for (size_t b : plan_.root_buckets) {
    acquire(b);
    ++holders_[b];
  }
}

void ZeroParameterCoordinator::gatherAll() {
  if (mode_ == Mode::all) return;
  // One bucket in flight ahead of the one being copied out: receive buffers for two buckets at
  // most, not for the whole model.
  if (!state_.empty()) launch(0);
  for (size_t b = 0; b < state_.size(); ++b) {
    if (b + 1 < state_.size()) launch(b + 1);
    complete(b);
  }
  mode_ = Mode::all;
}

void ZeroParameterCoordinator::forEachBucketWhole(const std::function<void(const std::vector<size_t>&)>& fn) {
  LOCKSTEP_CHECK(mode_ == Mode::released, "forEachBucketWhole inside a step or while gathered");
  std::exception_ptr error;
  if (!state_.empty()) launch(0);
  for (size_t b = 0; b < state_.size(); ++b) {
    if (b + 1 < state_.size()) launch(b + 1);
    complete(b);
    if (!error) {
      try {
        fn(layout_.buckets[b].params);
      } catch (...) {
        error = std::current_exception();
      }
    }
    releaseBucket(b);
  }
  if (error) std::rethrow_exception(error);
}

void ZeroParameterCoordinator::endStep() {
  // A training step's order (it had a backward) is what the next step prefetches by.
  if (mode_ == Mode::step &&
      std::any_of(recording_.begin(), recording_.end(), [](const TraceEvent& e) { return e.backward; }))
    trace_ = recording_;
  recording_.clear();
  for (size_t b = 0; b < state_.size(); ++b) releaseBucket(b);
  std::fill(holders_.begin(), holders_.end(), 0);
  std::fill(unit_active_.begin(), unit_active_.end(), false);
  mode_ = Mode::released;
  in_backward_ = false;
}

void ZeroParameterCoordinator::acquireUnit(size_t u, bool backward) {
  if (mode_ != Mode::step) return;
  if (backward) {
    in_backward_ = true;
    unit_pending_[u] = unit_grad_params_[u];
    if (before_unit_backward_) before_unit_backward_();
  }
  ++fetch_stats_.unit_gathers;
  bool ready = true;
  for (size_t b : plan_.unit_buckets[u]) ready = ready && state_[b] != State::released;
  fetch_stats_.ready += ready ? 1 : 0;
  if (!unit_active_[u]) {
    unit_active_[u] = true;
    for (size_t b : plan_.unit_buckets[u]) {
      acquire(b);
      ++holders_[b];
    }
  }
  const TraceEvent event{u, backward};
  recording_.push_back(event);
  if (on_trace_ && trace_pos_ < trace_.size() && trace_[trace_pos_] == event) {
    prefetchByTrace(trace_pos_++);
    return;
  }
  on_trace_ = false;  // off the recorded order: the layers' order for the rest of this step
  // The units next in the direction this pass runs, up to stage3_prefetch_bucket_size elements
  // and within stage3_max_live_parameters (a recomputation inside backward prefetches nothing:
  // the backward's own order does).
  if (!backward && in_backward_) return;
  int64_t budget = options_.prefetch_bucket_size;
  for (size_t v = u; budget > 0;) {
    if (backward ? v == 0 : v + 1 >= plan_.units.size()) break;
    v = backward ? v - 1 : v + 1;
    bool fetched = true;
    for (size_t b : plan_.unit_buckets[v]) fetched = fetched && state_[b] != State::released;
    if (!fetched) {
      if (live_ + unit_numel_[v] > options_.max_live_parameters) break;
      prefetchUnit(v);
    }
    budget -= unit_numel_[v];
  }
}

void ZeroParameterCoordinator::prefetchByTrace(size_t at) {
  // The units that followed in the recorded order, each counted once against
  // stage3_prefetch_bucket_size (those still whole or in flight too), fetched within
  // stage3_max_live_parameters.
  int64_t budget = options_.prefetch_bucket_size;
  std::vector<bool> counted(plan_.units.size(), false);
  counted[trace_[at].unit] = true;
  for (size_t i = at + 1; i < trace_.size() && budget > 0; ++i) {
    const size_t v = trace_[i].unit;
    if (counted[v]) continue;
    counted[v] = true;
    bool fetched = true;
    for (size_t b : plan_.unit_buckets[v]) fetched = fetched && state_[b] != State::released;
    if (!fetched) {
      if (live_ + unit_numel_[v] > options_.max_live_parameters) break;
      prefetchUnit(v);
    }
    budget -= unit_numel_[v];
  }
}

void ZeroParameterCoordinator::prefetchUnit(size_t u) {
  for (size_t b : plan_.unit_buckets[u]) launch(b);
}

void ZeroParameterCoordinator::releaseUnit(size_t u) {
  if (mode_ != Mode::step || !unit_active_[u]) return;
  unit_active_[u] = false;
  for (size_t b : plan_.unit_buckets[u]) {
    if (--holders_[b] == 0) releaseBucket(b);
  }
}

Variable ZeroParameterCoordinator::afterForward(size_t u, const Variable& out) {
  if (mode_ != Mode::step) return out;
  const bool backward_follows = autograd::isGradEnabled() && out.requiresGrad();
  // stage3_max_reuse_distance: the layers after this one run forward and then backward before this
  // one's backward needs it again.
  int64_t distance = 0;
  for (size_t v = u + 1; v < plan_.units.size(); ++v) distance += 2 * unit_numel_[v];
  if (!backward_follows || in_backward_ || distance >= options_.max_reuse_distance ||
      live_ > options_.max_live_parameters) {
    releaseUnit(u);
  }
  if (!backward_follows) return out;
  return autograd::record<GatherForBackward>(out.tensor(), {&out}, this, u);
}

void ZeroParameterCoordinator::onGradReady(size_t p) {
  for (size_t u : units_of_param_[p]) {
    if (unit_pending_[u] > 0 && --unit_pending_[u] == 0) releaseUnit(u);
  }
}

int64_t ZeroParameterCoordinator::residentBytes() const {
  int64_t bytes = 0;
  if (swap_) {
    bytes = swap_->residentBytes();
  } else {
    for (const Tensor& t : pieces_) bytes += static_cast<int64_t>(t.nbytes());
  }
  for (size_t b = 0; b < flat_.size(); ++b) {
    if (flat_[b].defined()) {
      if (flat_[b].storage()->resident()) bytes += static_cast<int64_t>(flat_[b].nbytes());
      continue;
    }
    for (size_t p : layout_.buckets[b].params) {
      const Tensor& t = params_[p].tensor();
      if (t.storage()->resident()) bytes += static_cast<int64_t>(t.nbytes());
    }
  }
  return bytes;
}

}  // namespace lockstep::parallel
