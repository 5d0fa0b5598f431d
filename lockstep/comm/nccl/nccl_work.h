#pragma once
// The Work of one NCCL op (c10d's WorkNCCL): the op runs on the group's communication stream and
// completes when an event recorded after it there has completed. NcclComm's watchdog thread
// polls that event, NCCL's asynchronous errors and the op's deadline.
#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <string>

#include "lockstep/comm/work.h"

namespace lockstep::comm::nccl {

class NcclComm;

class NcclWork : public Work {
 public:
  /// end: recorded on the communication stream after the op; owned by this Work from now on.
  NcclWork(std::string description, std::weak_ptr<NcclComm> comm, int device, cudaStream_t caller,
           cudaEvent_t end, std::chrono::steady_clock::time_point deadline, bool host_blocking);
  ~NcclWork() override;

  /// True once the op's end event completed (or the op failed). Polls the event. Thread-safe.
  bool isCompleted() const override;
  /// Makes the caller's stream (BufferPlace::stream of the op) wait for the op, so kernels queued
  /// there afterwards see its result, and rethrows the op's error if it already failed.
  /// timeout == kForever: returns at once without blocking the host (like c10d's wait()), unless
  /// the op is a barrier, which blocks until done. An explicit timeout also blocks the host,
  /// polling until the op is done; when it runs out, the communicator is aborted
  /// (ncclCommAbort) and TimeoutError names the op and rank. Either way the op fails by its own
  /// deadline (the group's timeout): the watchdog aborts the communicator then. Thread-safe.
  void wait(std::chrono::milliseconds timeout = kForever) override;

  cudaEvent_t endEvent() const { return end_; }
  std::chrono::steady_clock::time_point deadline() const { return deadline_; }

 private:
  std::weak_ptr<NcclComm> comm_;
  int device_;
  cudaStream_t caller_;
  cudaEvent_t end_;
  std::chrono::steady_clock::time_point deadline_;
  bool host_blocking_;
};

}  // namespace lockstep::comm::nccl
