#pragma once
// GPU buffers through a host backend (PyTorch's gloo with CUDA tensors): for ranks that share a
// GPU, where NCCL cannot run (one rank per GPU), and for backend shm or gloo asked for by name.
//
// Each op, on the issuing thread, queues a copy of its input from the device into pinned host
// memory on a side stream that first waits for the work queued so far on the buffers' stream
// (BufferPlace::stream), and queues the op on this group's worker. The worker waits for that copy
// (up to the op's deadline), runs the collective of the host group on the pinned memory, and
// queues the copy of the result back to the device on the buffers' stream, so that work queued
// there after Work::wait() sees it. The Work completes once the copy back is queued: wait() blocks
// the host until the host collective is done (the data passes through it), then returns without
// waiting for the GPU, as nccl's wait() does; kernels queued on the buffers' stream afterwards run
// after the copy. Pinned staging is pooled and reused once the copy back has finished on the GPU.
//
// The host group must be this group's alone: its ops are issued from this group's worker in
// issue order, so a host op issued elsewhere on it would interleave differently on each rank.
// Failure: as the host group's (a dead or stuck peer fails the op naming it); a buffers' stream
// that does not produce the input by the op's deadline is a TimeoutError naming the op.
#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "lockstep/comm/process_group.h"

namespace lockstep::comm::cuda {

class PinnedStagingPool;

/// Thread-safety: see ProcessGroup.
class HostStagedProcessGroup : public ProcessGroup {
 public:
  /// host: a group over the same ranks, moving host memory (shm, gloo, ...), used by this group
  /// only. Not collective.
  explicit HostStagedProcessGroup(std::shared_ptr<ProcessGroup> host);
  ~HostStagedProcessGroup() override;

  /// The host group's name: "shm", "gloo"; each Work's description adds "via host".
  std::string backendName() const override { return host_->backendName(); }
  /// The ops; barrier is the host group's, its wait() blocks until every rank arrived.
  LOCKSTEP_PROCESS_GROUP_OPS_OVERRIDE

  /// Pinned staging bytes held (in use or cached for reuse). Thread-safe.
  size_t pinnedBytes() const;

 private:
  /// One op's device side: its input copied to the host before the collective, its output copied
  /// back after (either may be empty).
  struct Transfer {
    const void* device_in = nullptr;
    size_t in_bytes = 0;
    void* device_out = nullptr;
    size_t out_bytes = 0;
    bool in_place = false;  // device_in == device_out: one staging area for both
  };
  /// Runs on the worker: the host collective on the staged host_in / host_out, with the op's
  /// remaining time as its timeout; returns its Work (waited on at once).
  using HostCall = std::function<std::shared_ptr<Work>(ProcessGroup& host, const void* host_in,
                                                       void* host_out, std::chrono::milliseconds timeout)>;

  std::shared_ptr<Work> run(OpType type, const std::string& detail, std::chrono::milliseconds timeout,
                            const BufferPlace& place, const Transfer& transfer, bool defer, HostCall call);
  // The side stream that copies device -> host on device (created at its first use). Issuing thread.
  cudaStream_t copyStream(int device);

  std::shared_ptr<ProcessGroup> host_;
  std::shared_ptr<PinnedStagingPool> pool_;
  std::mutex streams_mutex_;
  std::map<int, cudaStream_t> copy_streams_;
  std::map<int, cudaEvent_t> ready_events_;  // recorded on the buffers' stream, waited on by copyStream
};

}  // namespace lockstep::comm::cuda
