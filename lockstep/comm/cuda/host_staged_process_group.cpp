#include "lockstep/comm/cuda/host_staged_process_group.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "lockstep/comm/nccl/nccl_util.h"
#include "lockstep/util/error.h"

namespace lockstep::comm::cuda {

using ::lockstep::detail::concat;
using nccl::checkCuda;
using nccl::DeviceGuard;
using std::chrono::milliseconds;

// Pinned host blocks, each with an event recorded after its last use on the GPU (the copy in, then
// the copy back): a block is handed out again only once that event completed, so a copy back
// still in flight never has its source overwritten by the next op.
class PinnedStagingPool {
 public:
  struct Block {
    char* data = nullptr;
    size_t bytes = 0;
    int device = -1;
    cudaEvent_t last_use = nullptr;  // an event of device
    bool in_use = false;
  };

  ~PinnedStagingPool() {
    for (auto& b : blocks_) {
      DeviceGuard guard(b->device, std::nothrow);
      (void)cudaEventSynchronize(b->last_use);
      (void)cudaEventDestroy(b->last_use);
      (void)cudaFreeHost(b->data);
    }
  }

  // The smallest free block of at least bytes for device whose last use finished, else a new one
  // (a power of two, so that ops of similar sizes reuse it). device must be current.
  Block* take(int device, size_t bytes, const std::string& what) {
    std::lock_guard lock(mutex_);
    Block* best = nullptr;
    for (auto& b : blocks_) {
      if (b->in_use || b->device != device || b->bytes < bytes || (best && best->bytes <= b->bytes)) continue;
      if (cudaEventQuery(b->last_use) == cudaSuccess) best = b.get();
    }
    if (best == nullptr) {
      auto b = std::make_unique<Block>();
      b->bytes = std::max<size_t>(4096, std::bit_ceil(bytes));
      b->device = device;
      checkCuda(cudaEventCreateWithFlags(&b->last_use, cudaEventDisableTiming), what + ": cudaEventCreate");
      cudaError_t err = cudaHostAlloc(reinterpret_cast<void**>(&b->data), b->bytes, cudaHostAllocPortable);
      if (err != cudaSuccess) {
        (void)cudaEventDestroy(b->last_use);
        checkCuda(err, concat(what, ": cudaHostAlloc of ", b->bytes, " bytes of pinned staging memory"));
      }
      held_ += b->bytes;
      best = b.get();
      blocks_.push_back(std::move(b));
    }
    best->in_use = true;
    return best;
  }

  void release(Block* b) {
    std::lock_guard lock(mutex_);
    b->in_use = false;
  }

  size_t bytes() const {
    std::lock_guard lock(mutex_);
    return held_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Block>> blocks_;
  size_t held_ = 0;
};

namespace {

// What the worker needs of one op. Gives its block back when the op is done with it (also when
// the op never ran): the block's event then marks its last use on the GPU.
struct StagedOp {
  std::shared_ptr<PinnedStagingPool> pool;
  PinnedStagingPool::Block* block = nullptr;
  int device = -1;
  cudaStream_t caller = nullptr;
  size_t in_bytes = 0;
  void* device_out = nullptr;
  size_t out_bytes = 0;
  char* host_in = nullptr;
  char* host_out = nullptr;
  // Before the Work completes, so that the next op of the same size finds the block free.
  void releaseBlock() {
    if (block != nullptr) pool->release(block);
    block = nullptr;
  }
  ~StagedOp() { releaseBlock(); }
};

std::string sizeText(size_t count, DType dtype) { return concat(count, " x ", dtypeName(dtype)); }

// Polls event (the input's copy to the host) until it completed or the op's deadline passed.
void waitForInput(cudaEvent_t event, const OpContext& ctx, int rank, int device) {
  for (int polls = 0;; ++polls) {
    const cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady)
      checkCuda(e, concat(ctx.name, ": copying the input from cuda:", device, " to the host"));
    LOCKSTEP_ENFORCE(std::chrono::steady_clock::now() < ctx.deadline, TimeoutError, ctx.name,
                     " timed out after ", ctx.timeout.count(), " ms on rank ", rank,
                     ": the input on cuda:", device,
                     " was not ready (the work queued before the op on its stream has not finished)");
    if (polls < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace

HostStagedProcessGroup::HostStagedProcessGroup(std::shared_ptr<ProcessGroup> host)
    : ProcessGroup(host->rank(), host->size()),
      host_(std::move(host)),
      pool_(std::make_shared<PinnedStagingPool>()) {
  setTimeout(host_->timeout());
}

HostStagedProcessGroup::~HostStagedProcessGroup() {
  stopWorker();  // every queued op ran: its copy back is queued
  for (auto& [device, stream] : copy_streams_) {
    DeviceGuard guard(device, std::nothrow);
    (void)cudaStreamSynchronize(stream);
    (void)cudaStreamDestroy(stream);
    (void)cudaEventDestroy(ready_events_[device]);
  }
}

size_t HostStagedProcessGroup::pinnedBytes() const { return pool_->bytes(); }

cudaStream_t HostStagedProcessGroup::copyStream(int device) {
  std::lock_guard lock(streams_mutex_);
  auto it = copy_streams_.find(device);
  if (it != copy_streams_.end()) return it->second;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;
  checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            concat("backend ", backendName(), " via host: cudaStreamCreate on cuda:", device));
  const cudaError_t err = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (err != cudaSuccess) (void)cudaStreamDestroy(stream);
  checkCuda(err, concat("backend ", backendName(), " via host: cudaEventCreate on cuda:", device));
  ready_events_[device] = ready;
  return copy_streams_[device] = stream;
}

std::shared_ptr<Work> HostStagedProcessGroup::run(OpType type, const std::string& detail,
                                                  milliseconds timeout, const BufferPlace& place,
                                                  const Transfer& t, bool defer, HostCall call) {
  const bool moves = t.in_bytes > 0 || t.out_bytes > 0;
  LOCKSTEP_ENFORCE(place.onDevice() || !moves, ValueError, opTypeName(type), " (", detail, "): backend ",
                   backendName(),
                   " via host takes GPU buffers here, but the op's place says host memory "
                   "(BufferPlace::device = -1); give the buffers' device and stream");
  auto op = std::make_shared<StagedOp>();
  op->pool = pool_;
  op->device = place.device;
  op->caller = static_cast<cudaStream_t>(place.stream);
  op->in_bytes = t.in_bytes;
  op->device_out = t.device_out;
  op->out_bytes = t.out_bytes;
  if (moves) {
    const std::string what = concat(opTypeName(type), " (", detail, ", cuda:", place.device, " via host)");
    DeviceGuard guard(place.device);
    const size_t in_area = t.in_place ? std::max(t.in_bytes, t.out_bytes) : t.in_bytes;
    const size_t out_offset = t.in_place ? 0 : (in_area + 63) / 64 * 64;
    op->block = pool_->take(place.device, t.in_place ? in_area : out_offset + t.out_bytes, what);
    if (t.in_place || t.in_bytes > 0) op->host_in = op->block->data;
    if (t.in_place || t.out_bytes > 0) op->host_out = op->block->data + out_offset;
    if (t.in_bytes > 0) {
      // The copy waits for the work queued so far on the buffers' stream (their producer), on a
      // side stream so that the compute queued there next does not wait for the copy.
      cudaStream_t side = copyStream(place.device);
      cudaEvent_t ready = nullptr;
      {
        std::lock_guard lock(streams_mutex_);
        ready = ready_events_[place.device];
      }
      checkCuda(cudaEventRecord(ready, op->caller), what + ": cudaEventRecord on the buffers' stream");
      checkCuda(cudaStreamWaitEvent(side, ready, 0), what + ": cudaStreamWaitEvent");
      checkCuda(cudaMemcpyAsync(op->host_in, t.device_in, t.in_bytes, cudaMemcpyDeviceToHost, side),
                what + ": copying the input to pinned host memory");
      checkCuda(cudaEventRecord(op->block->last_use, side), what + ": cudaEventRecord");
    }
  }
  OpBody body = [op, host = host_, call = std::move(call), me = rank()](const OpContext& ctx) {
    std::optional<DeviceGuard> guard;
    if (op->device >= 0) guard.emplace(op->device);
    if (op->in_bytes > 0) waitForInput(op->block->last_use, ctx, me, op->device);
    const auto left =
        std::chrono::duration_cast<milliseconds>(ctx.deadline - std::chrono::steady_clock::now());
    call(*host, op->host_in, op->host_out, std::max(left, milliseconds(1)))->wait();
    if (op->out_bytes > 0) {
      // On the buffers' stream: whatever is queued there after Work::wait() sees the result.
      checkCuda(
          cudaMemcpyAsync(op->device_out, op->host_out, op->out_bytes, cudaMemcpyHostToDevice, op->caller),
          concat(ctx.name, ": copying the result back to cuda:", op->device));
      checkCuda(cudaEventRecord(op->block->last_use, op->caller), concat(ctx.name, ": cudaEventRecord"));
    }
    op->releaseBlock();
  };
  const std::string where = moves ? concat("cuda:", place.device, " via host") : std::string("via host");
  return enqueue(type, detail.empty() ? where : concat(detail, ", ", where), timeout, std::move(body), defer);
}

std::shared_ptr<Work> HostStagedProcessGroup::allreduce(void* data, size_t count, DType dtype,
                                                        const AllreduceOptions& o) {
  const size_t bytes = count * dtypeSize(dtype);
  return run(OpType::allreduce, concat(sizeText(count, dtype), ", ", reduceOpName(o.op)), o.timeout, o.place,
             {data, bytes, data, bytes, true}, o.defer,
             [=](ProcessGroup& h, const void*, void* out, milliseconds timeout) {
               AllreduceOptions ho;
               ho.op = o.op;
               ho.timeout = timeout;
               ho.defer = true;  // waited on at once, on this worker
               return h.allreduce(out, count, dtype, ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::broadcast(void* data, size_t count, DType dtype,
                                                        const BroadcastOptions& o) {
  checkRoot(o.root, "broadcast");
  const size_t bytes = count * dtypeSize(dtype);
  const bool root = rank() == o.root;  // the root's data goes out; the others' comes back
  return run(OpType::broadcast, concat(sizeText(count, dtype), ", root ", o.root), o.timeout, o.place,
             {data, root ? bytes : 0, data, root ? 0 : bytes, true}, false,
             [=](ProcessGroup& h, const void*, void* out, milliseconds timeout) {
               BroadcastOptions ho;
               ho.root = o.root;
               ho.timeout = timeout;
               return h.broadcast(out, count, dtype, ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::reduce(void* data, size_t count, DType dtype,
                                                     const ReduceOptions& o) {
  checkRoot(o.root, "reduce");
  const size_t bytes = count * dtypeSize(dtype);
  return run(OpType::reduce, concat(sizeText(count, dtype), ", ", reduceOpName(o.op), ", root ", o.root),
             o.timeout, o.place, {data, bytes, data, rank() == o.root ? bytes : 0, true}, false,
             [=](ProcessGroup& h, const void*, void* out, milliseconds timeout) {
               ReduceOptions ho;
               ho.op = o.op;
               ho.root = o.root;
               ho.timeout = timeout;
               return h.reduce(out, count, dtype, ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::allgather(const void* in, void* out, size_t count, DType dtype,
                                                        const AllgatherOptions& o) {
  const size_t bytes = count * dtypeSize(dtype);
  return run(OpType::allgather, sizeText(count, dtype), o.timeout, o.place,
             {in, bytes, out, bytes * static_cast<size_t>(size()), false}, false,
             [=](ProcessGroup& h, const void* hin, void* hout, milliseconds timeout) {
               AllgatherOptions ho;
               ho.timeout = timeout;
               return h.allgather(hin, hout, count, dtype, ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::allgatherv(const void* in, void* out,
                                                         const std::vector<size_t>& counts, DType dtype,
                                                         const AllgatherOptions& o) {
  LOCKSTEP_ENFORCE(counts.size() == static_cast<size_t>(size()), ValueError, "allgatherv: ", counts.size(),
                   " counts for a group of ", size(), " ranks; give one per rank");
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t es = dtypeSize(dtype);
  return run(OpType::allgatherv, sizeText(total, dtype), o.timeout, o.place,
             {in, counts[static_cast<size_t>(rank())] * es, out, total * es, false}, false,
             [=](ProcessGroup& h, const void* hin, void* hout, milliseconds timeout) {
               AllgatherOptions ho;
               ho.timeout = timeout;
               return h.allgatherv(hin, hout, counts, dtype, ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::reduceScatter(const void* in, void* out, size_t count,
                                                            DType dtype, const ReduceScatterOptions& o) {
  const size_t bytes = count * dtypeSize(dtype);
  return run(OpType::reduceScatter, concat(sizeText(count, dtype), ", ", reduceOpName(o.op)), o.timeout,
             o.place, {in, bytes * static_cast<size_t>(size()), out, bytes, false}, false,
             [=](ProcessGroup& h, const void* hin, void* hout, milliseconds timeout) {
               ReduceScatterOptions ho;
               ho.op = o.op;
               ho.timeout = timeout;
               return h.reduceScatter(hin, hout, count, dtype, ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::gather(const void* in, void* out, size_t count, DType dtype,
                                                     const GatherOptions& o) {
  checkRoot(o.root, "gather");
  const size_t bytes = count * dtypeSize(dtype);
  return run(OpType::gather, concat(sizeText(count, dtype), ", root ", o.root), o.timeout, o.place,
             {in, bytes, out, rank() == o.root ? bytes * static_cast<size_t>(size()) : 0, false}, false,
             [=](ProcessGroup& h, const void* hin, void* hout, milliseconds timeout) {
               GatherOptions ho;
               ho.root = o.root;
               ho.timeout = timeout;
               return h.gather(hin, hout, count, dtype, ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::scatter(const void* in, void* out, size_t count, DType dtype,
                                                      const ScatterOptions& o) {
  checkRoot(o.root, "scatter");
  const size_t bytes = count * dtypeSize(dtype);
  return run(OpType::scatter, concat(sizeText(count, dtype), ", root ", o.root), o.timeout, o.place,
             {in, rank() == o.root ? bytes * static_cast<size_t>(size()) : 0, out, bytes, false}, false,
             [=](ProcessGroup& h, const void* hin, void* hout, milliseconds timeout) {
               ScatterOptions ho;
               ho.root = o.root;
               ho.timeout = timeout;
               return h.scatter(hin, hout, count, dtype, ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::alltoall(const void* in, void* out, size_t count, DType dtype,
                                                       const AlltoallOptions& o) {
  const size_t bytes = count * dtypeSize(dtype) * static_cast<size_t>(size());
  return run(OpType::alltoall, sizeText(count, dtype), o.timeout, o.place, {in, bytes, out, bytes, false},
             false, [=](ProcessGroup& h, const void* hin, void* hout, milliseconds timeout) {
               AlltoallOptions ho;
               ho.timeout = timeout;
               return h.alltoall(hin, hout, count, dtype, ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::barrier(const BarrierOptions& o) {
  return run(OpType::barrier, "", o.timeout, o.place, {}, false,
             [](ProcessGroup& h, const void*, void*, milliseconds timeout) {
               BarrierOptions ho;
               ho.timeout = timeout;
               return h.barrier(ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::send(const void* data, size_t count, DType dtype, int dst,
                                                   const SendRecvOptions& o) {
  checkPeer(dst, "send");
  return run(OpType::send, concat(sizeText(count, dtype), " to rank ", dst), o.timeout, o.place,
             {data, count * dtypeSize(dtype), nullptr, 0, false}, false,
             [=](ProcessGroup& h, const void* hin, void*, milliseconds timeout) {
               SendRecvOptions ho;
               ho.tag = o.tag;
               ho.timeout = timeout;
               return h.send(hin, count, dtype, dst, ho);
             });
}

std::shared_ptr<Work> HostStagedProcessGroup::recv(void* data, size_t count, DType dtype, int src,
                                                   const SendRecvOptions& o) {
  checkPeer(src, "recv");
  return run(OpType::recv, concat(sizeText(count, dtype), " from rank ", src), o.timeout, o.place,
             {nullptr, 0, data, count * dtypeSize(dtype), false}, false,
             [=](ProcessGroup& h, const void*, void* hout, milliseconds timeout) {
               SendRecvOptions ho;
               ho.tag = o.tag;
               ho.timeout = timeout;
               return h.recv(hout, count, dtype, src, ho);
             });
}

}  // namespace lockstep::comm::cuda
