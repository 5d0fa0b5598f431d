#include "lockstep/parallel/zero/grad_reducer.h"

#include <algorithm>

#include "lockstep/kernels/accumulate.h"
#include "lockstep/parallel/tensor_comm.h"
#include "lockstep/util/error.h"

namespace lockstep::parallel {

using autograd::Variable;

ZeroGradReducer::ZeroGradReducer(std::vector<Variable> params, std::vector<std::string> names,
                                 const ZeroLayout& layout, std::shared_ptr<comm::ProcessGroup> group,
                                 bool overlap, bool reduce_scatter, const std::string& swap_dir,
                                 const std::string& swap_key, bool host_pieces, bool pin_memory)
    : params_(std::move(params)),
      names_(std::move(names)),
      layout_(layout),
      group_(std::move(group)),
      overlap_(overlap),
      reduce_scatter_(reduce_scatter) {
  LOCKSTEP_CHECK(params_.size() == names_.size());
  rank_ = group_ ? group_->rank() : 0;
  LOCKSTEP_CHECK(layout_.world == (group_ ? group_->size() : 1), "layout world ", layout_.world);
  const DType dtype = params_.empty() ? DType::f32 : params_.front().dtype();
  device_ = params_.empty() ? Device::cpu() : params_.front().tensor().device();
  for (size_t p = 0; p < params_.size(); ++p) {
    LOCKSTEP_ENFORCE(params_[p].tensor().device() == device_, ValueError, "ZeRO: parameter '", names_[p],
                     "' is on ", deviceName(params_[p].tensor().device()), ", '", names_.front(), "' on ",
                     deviceName(device_), "; a rank's parameters must share one device");
  }
  piece_device_ = host_pieces ? Device::cpu() : device_;
  pin_memory_ = pin_memory && piece_device_ != device_;
  LOCKSTEP_ENFORCE(swap_dir.empty() || piece_device_.isCpu(), NotSupportedError,
                   "ZeRO: swapping gradient pieces to NVMe (", swap_key,
                   ") takes parameters on the host; they are on ", deviceName(device_));
  bucket_of_.assign(params_.size(), 0);
  for (const ZeroBucket& b : layout_.buckets) max_chunk_ = std::max(max_chunk_, b.chunk);
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    for (size_t p : layout_.buckets[b].params) bucket_of_[p] = b;
    // Swapped pieces start as zeros in the file: their memory is never touched here.
    const Shape shape{layout_.buckets[b].pieceSize(rank_)};
    pieces_.push_back(swap_dir.empty() ? Tensor::zeros(shape, dtype, piece_device_)
                                       : Tensor::empty(shape, dtype));
  }
  if (!swap_dir.empty()) {
    swap_ = std::make_unique<ZeroPieceSwap>(
        pieces_, swap_dir, "lockstep-zero-gradients-rank" + std::to_string(rank_), swap_key, /*zeros=*/true);
  }
  dtype_ = dtype;
  pending_.resize(layout_.buckets.size());
  for (size_t b = 0; b < pending_.size(); ++b) pending_[b] = layout_.buckets[b].params.size();
  ready_.assign(params_.size(), false);
  for (size_t p = 0; p < params_.size(); ++p)
    hook_ids_.push_back(params_[p].registerGradReadyHook([this, p](Variable&) { onGradReady(p); }));
}

ZeroGradReducer::~ZeroGradReducer() {
  for (size_t p = 0; p < params_.size(); ++p) params_[p].removeGradReadyHook(hook_ids_[p]);
  for (Slot& s : slots_) {
    try {
      if (s.work) s.work->wait();
    } catch (...) {  // a failed group: nothing left to wait for
    }
    try {
      s.copied.wait();  // host_recv is freed with the slot: its copy down must be done
    } catch (...) {
    }
  }
}

std::string ZeroGradReducer::missing() const {
  std::string out;
  for (size_t p = 0; p < params_.size(); ++p) {
    if (!ready_[p]) out += (out.empty() ? "" : ", ") + names_[p];
  }
  return out;
}

void ZeroGradReducer::checkComplete() const {
  LOCKSTEP_ENFORCE(ready_count_ == 0, ValueError,
                   "ZeRO stage 2: the last backward did not reduce every gradient because these parameters "
                   "received none: ",
                   missing(),
                   ". Make every parameter take part in the loss (ZeRO has no find_unused_parameters).");
}

void ZeroGradReducer::zero() {
  if (swap_) {
    swap_->setZero();
    return;
  }
  for (Tensor& t : pieces_) t.zero();
}

void ZeroGradReducer::acquirePiece(size_t b) {
  if (swap_) swap_->acquire(b);
}

void ZeroGradReducer::releasePiece(size_t b, bool changed) {
  if (swap_) swap_->release(b, changed);
}

size_t ZeroGradReducer::pieceBytes() const {
  if (swap_) return static_cast<size_t>(swap_->residentBytes());
  size_t n = 0;
  for (const Tensor& t : pieces_) n += t.nbytes();
  return n;
}

void ZeroGradReducer::onGradReady(size_t p) {
  LOCKSTEP_ENFORCE(
      !ready_[p], ValueError,
      "ZeRO stage 2: a new backward started before the previous one reduced every gradient; these "
      "parameters received none: ",
      missing(), ". Make every parameter take part in the loss.");
  ready_[p] = true;
  ++ready_count_;
  --pending_[bucket_of_[p]];
  // Strictly in bucket order, so every rank issues the same collectives in the same order.
  while (next_launch_ < pending_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
  if (next_launch_ < pending_.size()) return;
  for (Slot& s : slots_) complete(s);
  for (Slot& s : slots_) addHostBlock(s);  // the pieces whole once backward is done
  std::fill(ready_.begin(), ready_.end(), false);
  ready_count_ = 0;
  next_launch_ = 0;
  for (size_t b = 0; b < pending_.size(); ++b) pending_[b] = layout_.buckets[b].params.size();
}

void ZeroGradReducer::launch(size_t b) {
  const ZeroBucket& bucket = layout_.buckets[b];
  // Two slots alternate only when a reduction may still run while the next bucket fills.
  Slot& slot = slots_[overlap_ ? b % 2 : 0];
  complete(slot);  // the bucket two before this one, unless completeAllButLatest() did already
  const size_t elem = dtypeSize(dtype_);
  for (size_t p : bucket.params) {
    LOCKSTEP_ENFORCE(params_[p].grad().dtype() == dtype_, ValueError, "ZeRO: gradient of '", names_[p],
                     "' is ", dtypeName(params_[p].grad().dtype()), ", its parameter's bucket is ",
                     dtypeName(dtype_));
  }
  // A bucket that is one parameter split evenly is already laid out as `world` blocks: its
  // gradient is reduced where it is, with no staging copy beside it.
  const Tensor& first = params_[bucket.params.front()].grad();
  const comm::BufferPlace place = placeOf(first);  // the gradients', the buffers' and the ops'
  if (bucket.params.size() == 1 && bucket.chunk * layout_.world == bucket.numel && first.isContiguous()) {
    slot.staging = first;
  } else {
    // Taken from the allocator per launch and handed back at completion, so that between buckets
    // no staging memory is held (the allocator's cache makes it free after the first step).
    const Shape shape{bucket.chunk * layout_.world};
    slot.staging = bucket.chunk * layout_.world != bucket.numel
                       ? Tensor::zeros(shape, dtype_, device_)  // padding travels as zeros
                       : Tensor::empty(shape, dtype_, MemoryFormat::contiguous, device_);
    char* staging = static_cast<char*>(slot.staging.devicePtr());
    for (int r = 0; r < layout_.world; ++r) {
      for (const ZeroSegment& s : segmentsIn(bucket, bucket.piece[r], bucket.piece[r + 1])) {
        Tensor g = params_[s.param].grad();
        if (!g.isContiguous()) g = g.contiguous();
        copyBytes(staging + (r * bucket.chunk + s.bucket_offset - bucket.piece[r]) * elem,
                  static_cast<const char*>(g.devicePtr()) + s.param_offset * elem, s.numel * elem, place);
      }
    }
  }
  for (size_t p : bucket.params) params_[p].setGrad(Tensor());  // the piece is all this rank keeps
  // 1/world of a bucket, kept; with host pieces taken anew for each launch, as the last one may
  // still be on its way down on the side stream (the allocator hands it out again once it is).
  if (!slot.recv.defined())
    slot.recv = Tensor::empty({max_chunk_}, dtype_, MemoryFormat::contiguous, device_);
  slot.bucket = static_cast<long>(b);
  char* staging = static_cast<char*>(slot.staging.devicePtr());
  void* recv = slot.recv.devicePtr();
  if (group_ && layout_.world > 1 && reduce_scatter_) {
    comm::ReduceScatterOptions o;
    o.op = comm::ReduceOp::avg;
    o.place = place;
    slot.work = group_->reduceScatter(staging, recv, bucket.chunk, dtype_, o);
  } else if (group_ && layout_.world > 1) {
    // DeepSpeed's reduce_scatter: false: every rank averages the whole bucket and keeps its block.
    comm::AllreduceOptions o;
    o.op = comm::ReduceOp::avg;
    o.place = place;
    group_->allreduce(staging, bucket.chunk * layout_.world, dtype_, o)->wait();
    copyBytes(recv, staging + rank_ * bucket.chunk * elem, bucket.chunk * elem, place);
  } else {
    copyBytes(recv, staging, bucket.chunk * elem, place);
  }
  if (!overlap_) complete(slot);
}

void ZeroGradReducer::completeAllButLatest() {
  if (next_launch_ == 0) return;
  const size_t latest = next_launch_ - 1;
  for (Slot& s : slots_) {
    if (s.bucket >= 0 && static_cast<size_t>(s.bucket) != latest) complete(s);
  }
}

void ZeroGradReducer::complete(Slot& slot) {
  if (slot.bucket < 0) return;
  if (slot.work) slot.work->wait();
  slot.work.reset();
  slot.staging = Tensor();
  Tensor& piece = pieces_[slot.bucket];
  if (piece_device_ != device_) {
    // Host pieces: the block is copied down now and added when the host needs the slot again (or
    // backward ends), so the host does not wait for the GPU at every bucket.
    addHostBlock(slot);  // the block before, from this slot's last use
    if (piece.numel() > 0) {
      if (!slot.host_recv.defined()) {
        slot.host_recv = Tensor::empty({max_chunk_}, dtype_);
        if (pin_memory_) slot.host_recv = slot.host_recv.pinMemory();
      }
      // On a side stream, so that the backward's kernels queued next do not wait for the copy; the
      // block's memory goes back to the allocator, to be reused once the copy is done.
      const comm::BufferPlace side = forkSidePlace(placeOf(device_), SideLane::to_host);
      copyBytes(slot.host_recv.devicePtr(), slot.recv.devicePtr(), piece.nbytes(), side);
      slot.copied.record(side);
      recordSideUse(slot.recv, side);
      slot.recv = Tensor();
      slot.host_bucket = slot.bucket;
    }
    slot.bucket = -1;
    return;
  }
  acquirePiece(static_cast<size_t>(slot.bucket));
  if (piece.numel() > 0) kernels::addInto(piece, slot.recv.narrow(0, 0, piece.numel()));
  releasePiece(static_cast<size_t>(slot.bucket), true);
  slot.bucket = -1;
}

void ZeroGradReducer::addHostBlock(Slot& slot) {
  if (slot.host_bucket < 0) return;
  slot.copied.wait();
  const auto b = static_cast<size_t>(slot.host_bucket);
  slot.host_bucket = -1;
  acquirePiece(b);
  kernels::addInto(pieces_[b], slot.host_recv.narrow(0, 0, pieces_[b].numel()));
  releasePiece(b, true);
}

}  // namespace lockstep::parallel
