#include "lockstep/comm/nccl/nccl_process_group.h"

#include <cstring>
#include <numeric>

#include "lockstep/comm/cuda/device_identity.h"
#include "lockstep/comm/device_sharing.h"
#include "lockstep/comm/nccl/nccl_comm.h"
#include "lockstep/comm/nccl/nccl_util.h"
#include "lockstep/comm/worker_environment.h"
#include "lockstep/util/error.h"

namespace lockstep::comm {

using ::lockstep::detail::concat;
using nccl::checkNccl;
using nccl::toNccl;

namespace {

// The NCCL calls of one op between ncclGroupStart and ncclGroupEnd; the first error wins.
template <typename Body>
ncclResult_t grouped(Body body) {
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  ncclResult_t inner = body();
  ncclResult_t end = ncclGroupEnd();
  return inner != ncclSuccess && inner != ncclInProgress ? inner : end;
}

bool failed(ncclResult_t r) { return r != ncclSuccess && r != ncclInProgress; }

const char* at(const void* p, size_t elements, DType dtype) {
  return static_cast<const char*>(p) + elements * dtypeSize(dtype);
}
char* at(void* p, size_t elements, DType dtype) {
  return static_cast<char*>(p) + elements * dtypeSize(dtype);
}

std::string sizeText(size_t count, DType dtype) { return concat(count, " x ", dtypeName(dtype)); }

}  // namespace

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const NcclOptions& options)
    : ProcessGroup(rank, size), store_(std::move(store)), options_(options) {
  LOCKSTEP_ENFORCE(store_ != nullptr, ValueError, "backend nccl needs a store to share its ncclUniqueId");
  nccl::requireVisibleDevice();
  const int devices = nccl::visibleDeviceCount();
  LOCKSTEP_ENFORCE(options_.device < devices, ValueError, "backend nccl: device cuda:", options_.device,
                   " does not exist; this process sees ", devices, " CUDA device(s)");
  setTimeout(options_.timeout);
}

NcclProcessGroup::~NcclProcessGroup() {
  stopWorker();
  int device = comm_ ? comm_->device() : -1;
  comm_.reset();  // waits for the ops in flight
  if (barrier_buf_ != nullptr) {
    nccl::DeviceGuard guard(device, std::nothrow);
    (void)cudaFree(barrier_buf_);
  }
}

nccl::NcclComm& NcclProcessGroup::commOn(int device, const std::string& what) {
  if (comm_) return *comm_;
  LOCKSTEP_ENFORCE(init_error_.empty(), PeerError, what,
                   ": not run because creating the NCCL communicator failed earlier: ", init_error_);
  const int devices = nccl::visibleDeviceCount();
  LOCKSTEP_ENFORCE(device >= 0 && device < devices, ValueError, what, ": cuda:", device,
                   " does not exist; this process sees ", devices, " CUDA device(s)");
  try {
    // Ranks that share a GPU would fail in ncclCommInitRank (ncclInvalidUsage, on some ranks
    // only): every rank finds them first, from the same list, and says so with the fix.
    std::vector<DeviceIdentity> ids;
    try {
      ids = exchangeDeviceIdentities(*store_, rank(), size(), cuda::identifyDevice(device), timeout());
    } catch (const TimeoutError& e) {
      throw TimeoutError(concat(what, ": creating the NCCL communicator (rank ", rank(), " of ", size(),
                                " on cuda:", device, ") timed out after ", timeout().count(),
                                " ms: not every rank joined (", e.what(), ")"));
    }
    const DeviceSharing sharing = findSharedDevices(ids);
    LOCKSTEP_ENFORCE(!sharing.shared(), ValueError, what, ": ",
                     ncclSharedGpuError(describeSharing(sharing, ids)));
    // Rank 0 makes the id and shares it through the store; the others wait for it (the store's
    // timeout). One group per store prefix: the registry gives each its own.
    const std::string key = "nccl_unique_id";
    ncclUniqueId id;
    if (rank() == 0) {
      checkNccl(ncclGetUniqueId(&id), what + ": ncclGetUniqueId");
      store_->set(key, std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(&id),
                                            reinterpret_cast<const uint8_t*>(&id) + sizeof(id)));
    } else {
      std::vector<uint8_t> bytes = store_->get(key);
      LOCKSTEP_ENFORCE(bytes.size() == sizeof(id), PeerError, what, ": the store's ", key, " holds ",
                       bytes.size(), " bytes, not an ncclUniqueId (", sizeof(id),
                       "); is another kind of group using the same store prefix?");
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
    auto comm = std::make_shared<nccl::NcclComm>(device, rank(), size(), id, timeout(),
                                                 concat("nccl group (rank ", rank(), " of ", size(), ")"));
    nccl::DeviceGuard guard(device);
    nccl::checkCuda(cudaMalloc(&barrier_buf_, sizeof(float)), what + ": cudaMalloc of the barrier's float");
    comm_ = std::move(comm);
  } catch (const std::exception& e) {
    init_error_ = e.what();
    throw;
  }
  return *comm_;
}

template <typename Call>
std::shared_ptr<Work> NcclProcessGroup::run(OpType type, const std::string& detail,
                                            std::chrono::milliseconds timeout, const BufferPlace& place,
                                            bool host_blocking, Call call) {
  LOCKSTEP_ENFORCE(place.onDevice(), ValueError, opTypeName(type), " (", detail,
                   "): backend nccl moves GPU memory only, but the op's place says host memory "
                   "(BufferPlace::device = -1); set it to the buffers' device and stream, or use "
                   "backend gloo or shm for host buffers");
  OpContext ctx = nextOp(type, timeout);
  const std::string description =
      describe(ctx, detail.empty() ? concat("cuda:", place.device) : concat(detail, ", cuda:", place.device));
  nccl::NcclComm& comm = commOn(place.device, description);
  LOCKSTEP_ENFORCE(comm.device() == place.device, ValueError, description,
                   ": the buffers are on cuda:", place.device,
                   " but this group's communicator is on cuda:", comm.device(),
                   "; NCCL runs one rank per GPU: make a group per device");
  ctx.deadline = std::chrono::steady_clock::now() + ctx.timeout;
  return comm.launch(description, ctx, static_cast<cudaStream_t>(place.stream), host_blocking,
                     nccl::NcclComm::Call(std::move(call)));
}

std::shared_ptr<Work> NcclProcessGroup::allreduce(void* data, size_t count, DType dtype,
                                                  const AllreduceOptions& o) {
  return run(OpType::allreduce, concat(sizeText(count, dtype), ", ", reduceOpName(o.op)), o.timeout, o.place,
             false, [=](ncclComm_t c, cudaStream_t s) {
               return ncclAllReduce(data, data, count, toNccl(dtype), toNccl(o.op), c, s);
             });
}

std::shared_ptr<Work> NcclProcessGroup::broadcast(void* data, size_t count, DType dtype,
                                                  const BroadcastOptions& o) {
  checkRoot(o.root, "broadcast");
  return run(OpType::broadcast, concat(sizeText(count, dtype), ", root ", o.root), o.timeout, o.place, false,
             [=](ncclComm_t c, cudaStream_t s) {
               return ncclBroadcast(data, data, count, toNccl(dtype), o.root, c, s);
             });
}

std::shared_ptr<Work> NcclProcessGroup::reduce(void* data, size_t count, DType dtype,
                                               const ReduceOptions& o) {
  checkRoot(o.root, "reduce");
  return run(OpType::reduce, concat(sizeText(count, dtype), ", ", reduceOpName(o.op), ", root ", o.root),
             o.timeout, o.place, false, [=](ncclComm_t c, cudaStream_t s) {
               return ncclReduce(data, data, count, toNccl(dtype), toNccl(o.op), o.root, c, s);
             });
}

std::shared_ptr<Work> NcclProcessGroup::allgather(const void* in, void* out, size_t count, DType dtype,
                                                  const AllgatherOptions& o) {
  return run(
      OpType::allgather, sizeText(count, dtype), o.timeout, o.place, false,
      [=](ncclComm_t c, cudaStream_t s) { return ncclAllGather(in, out, count, toNccl(dtype), c, s); });
}

std::shared_ptr<Work> NcclProcessGroup::allgatherv(const void* in, void* out,
                                                   const std::vector<size_t>& counts, DType dtype,
                                                   const AllgatherOptions& o) {
  LOCKSTEP_ENFORCE(counts.size() == static_cast<size_t>(size()), ValueError, "allgatherv: ", counts.size(),
                   " counts for a group of ", size(), " ranks; give one per rank");
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  // One broadcast per rank from its own input into its block of out (c10d does the same).
  return run(OpType::allgatherv, sizeText(total, dtype), o.timeout, o.place, false,
             [=, me = rank()](ncclComm_t c, cudaStream_t s) {
               return grouped([&] {
                 size_t offset = 0;
                 for (size_t r = 0; r < counts.size(); ++r) {
                   const void* send = static_cast<int>(r) == me ? in : at(out, offset, dtype);
                   ncclResult_t res = ncclBroadcast(send, at(out, offset, dtype), counts[r], toNccl(dtype),
                                                    static_cast<int>(r), c, s);
                   if (failed(res)) return res;
                   offset += counts[r];
                 }
                 return ncclSuccess;
               });
             });
}

std::shared_ptr<Work> NcclProcessGroup::reduceScatter(const void* in, void* out, size_t count, DType dtype,
                                                      const ReduceScatterOptions& o) {
  return run(OpType::reduceScatter, concat(sizeText(count, dtype), ", ", reduceOpName(o.op)), o.timeout,
             o.place, false, [=](ncclComm_t c, cudaStream_t s) {
               return ncclReduceScatter(in, out, count, toNccl(dtype), toNccl(o.op), c, s);
             });
}

std::shared_ptr<Work> NcclProcessGroup::gather(const void* in, void* out, size_t count, DType dtype,
                                               const GatherOptions& o) {
  checkRoot(o.root, "gather");
  return run(OpType::gather, concat(sizeText(count, dtype), ", root ", o.root), o.timeout, o.place, false,
             [=, me = rank(), n = size()](ncclComm_t c, cudaStream_t s) {
               return grouped([&] {
                 if (me == o.root) {
                   for (int r = 0; r < n; ++r) {
                     ncclResult_t res = ncclRecv(at(out, r * count, dtype), count, toNccl(dtype), r, c, s);
                     if (failed(res)) return res;
                   }
                 }
                 return ncclSend(in, count, toNccl(dtype), o.root, c, s);
               });
             });
}

std::shared_ptr<Work> NcclProcessGroup::scatter(const void* in, void* out, size_t count, DType dtype,
                                                const ScatterOptions& o) {
  checkRoot(o.root, "scatter");
  return run(OpType::scatter, concat(sizeText(count, dtype), ", root ", o.root), o.timeout, o.place, false,
             [=, me = rank(), n = size()](ncclComm_t c, cudaStream_t s) {
               return grouped([&] {
                 if (me == o.root) {
                   for (int r = 0; r < n; ++r) {
                     ncclResult_t res = ncclSend(at(in, r * count, dtype), count, toNccl(dtype), r, c, s);
                     if (failed(res)) return res;
                   }
                 }
                 return ncclRecv(out, count, toNccl(dtype), o.root, c, s);
               });
             });
}

std::shared_ptr<Work> NcclProcessGroup::alltoall(const void* in, void* out, size_t count, DType dtype,
                                                 const AlltoallOptions& o) {
  return run(OpType::alltoall, sizeText(count, dtype), o.timeout, o.place, false,
             [=, n = size()](ncclComm_t c, cudaStream_t s) {
               return grouped([&] {
                 for (int r = 0; r < n; ++r) {
                   ncclResult_t res = ncclSend(at(in, r * count, dtype), count, toNccl(dtype), r, c, s);
                   if (failed(res)) return res;
                   res = ncclRecv(at(out, r * count, dtype), count, toNccl(dtype), r, c, s);
                   if (failed(res)) return res;
                 }
                 return ncclSuccess;
               });
             });
}

std::shared_ptr<Work> NcclProcessGroup::barrier(const BarrierOptions& o) {
  BufferPlace place = o.place;
  if (!place.onDevice()) {
    if (comm_) {
      place.device = comm_->device();
    } else if (options_.device >= 0) {
      place.device = options_.device;
    } else {
      place.device = localRankDevice(workerEnvironment().local_rank, nccl::visibleDeviceCount());
    }
  }
  // The float lives on the communicator's device, made by the first op: run() makes it first.
  return run(OpType::barrier, "", o.timeout, place, true, [this](ncclComm_t c, cudaStream_t s) {
    return ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, c, s);
  });
}

std::shared_ptr<Work> NcclProcessGroup::send(const void* data, size_t count, DType dtype, int dst,
                                             const SendRecvOptions& o) {
  checkPeer(dst, "send");
  LOCKSTEP_ENFORCE(o.tag == 0, NotSupportedError, "send: backend nccl does not support tags (tag ", o.tag,
                   "): NCCL matches sends and recvs by their order; use tag 0");
  return run(OpType::send, concat(sizeText(count, dtype), " to rank ", dst), o.timeout, o.place, false,
             [=](ncclComm_t c, cudaStream_t s) { return ncclSend(data, count, toNccl(dtype), dst, c, s); });
}

std::shared_ptr<Work> NcclProcessGroup::recv(void* data, size_t count, DType dtype, int src,
                                             const SendRecvOptions& o) {
  checkPeer(src, "recv");
  LOCKSTEP_ENFORCE(o.tag == 0, NotSupportedError, "recv: backend nccl does not support tags (tag ", o.tag,
                   "): NCCL matches sends and recvs by their order; use tag 0");
  return run(OpType::recv, concat(sizeText(count, dtype), " from rank ", src), o.timeout, o.place, false,
             [=](ncclComm_t c, cudaStream_t s) { return ncclRecv(data, count, toNccl(dtype), src, c, s); });
}

}  // namespace lockstep::comm
