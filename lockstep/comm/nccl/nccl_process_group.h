#pragma once
// Process group over NCCL for buffers in GPU memory (c10d's ProcessGroupNCCL). One rank per GPU.
//
//   comm::AllreduceOptions o;
//   o.place = {t.device().index(), cuda::currentStream(t.device())};  // where the data is ready
//   auto work = pg->allreduce(t.devicePtr(), t.numel(), t.dtype(), o);
//   work->wait();  // the caller's stream waits for the op; the host does not block
//
// The communicator is created at the group's first op, on the device of that op's buffers
// (NcclOptions::device for a barrier issued first): rank 0 makes the ncclUniqueId and sets it in
// the store, the others get it (like c10d). That first op is collective, like every other. First
// the ranks exchange their GPUs' identities (comm/device_sharing.h): ranks that share a GPU,
// which NCCL cannot run, get a ValueError on every rank naming them and the fix (backend auto,
// gloo or shm, which move GPU buffers through the host).
// Each op runs on the group's own communication stream, which first waits for an event recorded
// on the caller's stream (BufferPlace::stream), so the op sees the caller's queued kernels; the
// Work completes through an event recorded after the op (see NcclWork). Ops do not block the
// host, except barrier (whose wait blocks until every rank arrived).
//
// Failure: as the other backends. An op not done by its deadline (options.timeout, else the
// group's) or an asynchronous NCCL error (ncclCommGetAsyncError, polled by a watchdog thread and
// while waiting) aborts the communicator (ncclCommAbort): ops in flight fail with TimeoutError /
// PeerError naming the op, its sequence number and the rank; later ops fail at once.
//
// NCCL specifics: send/recv match by order, so their tag must be 0; buffers must be on the
// group's device; the AllreduceOptions::defer hint does not apply (ops go to the GPU at once).
#include <memory>
#include <string>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/store/store.h"

namespace lockstep::comm {

namespace nccl {
class NcclComm;
}

struct NcclOptions {
  std::chrono::milliseconds timeout = kDefaultCollectiveTimeout;  // default op timeout
  /// The GPU of a barrier issued before any op with buffers; -1: LOCAL_RANK modulo the visible
  /// devices (the launcher's one-GPU-per-local-rank layout).
  int device = -1;
};

/// Thread-safety: see ProcessGroup.
class NcclProcessGroup : public ProcessGroup {
 public:
  /// Not collective itself (the communicator is made at the first op). ValueError when this
  /// process sees no CUDA device.
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size, const NcclOptions& options = {});
  ~NcclProcessGroup() override;

  std::string backendName() const override { return "nccl"; }
  /// The ops; barrier is an allreduce of one float, its wait() blocks the host until every rank arrived.
  LOCKSTEP_PROCESS_GROUP_OPS_OVERRIDE

 private:
  template <typename Call>
  std::shared_ptr<Work> run(OpType type, const std::string& detail, std::chrono::milliseconds timeout,
                            const BufferPlace& place, bool host_blocking, Call call);
  // The communicator on device, made at the first op. Collective then.
  nccl::NcclComm& commOn(int device, const std::string& what);

  std::shared_ptr<Store> store_;
  NcclOptions options_;
  std::shared_ptr<nccl::NcclComm> comm_;
  std::string init_error_;       // why creating the communicator failed; later ops fail with it
  void* barrier_buf_ = nullptr;  // one float on the communicator's device, for barrier()
};

}  // namespace lockstep::comm
