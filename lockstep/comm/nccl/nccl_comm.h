#pragma once
// One NCCL communicator on one GPU with its communication stream, and the ops in flight on it.
// Created non-blocking (ncclConfig_t::blocking = 0) so that creation and every NCCL call can be
// given up on at a deadline with ncclCommAbort instead of hanging on a peer that never comes.
// A watchdog thread polls the ops' end events, ncclCommGetAsyncError and the ops' deadlines;
// the first failure aborts the communicator and fails every op in flight (c10d's watchdog).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/comm/nccl/nccl_work.h"
#include "lockstep/comm/process_group.h"

namespace lockstep::comm::nccl {

class NcclComm : public std::enable_shared_from_this<NcclComm> {
 public:
  /// Collective over the size ranks that share id: creates the communicator of rank on device
  /// and waits for it up to timeout. TimeoutError (ranks that did not join) or PeerError (NCCL's
  /// error) otherwise, with the communicator aborted. what names the group for messages.
  NcclComm(int device, int rank, int size, const ncclUniqueId& id, std::chrono::milliseconds timeout,
           std::string what);
  /// Waits for the ops in flight (each up to its deadline), then destroys the communicator.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int device() const { return device_; }

  /// Issues the NCCL calls of one op on the communication stream (inside ncclGroupStart/End
  /// when it issues several).
  using Call = std::function<ncclResult_t(ncclComm_t comm, cudaStream_t stream)>;
  /// The communication stream waits for the work queued so far on caller, then runs call; the
  /// Work completes with an event recorded after it. An op issued after a failure fails at once
  /// (returns a completed Work holding the error). Thread-safe.
  std::shared_ptr<Work> launch(const std::string& description, const OpContext& ctx, cudaStream_t caller,
                               bool host_blocking, const Call& call);
  /// Completes the ops whose end event completed; aborts on an async error or a passed
  /// deadline. Thread-safe.
  void pollAll();
  /// Aborts the communicator because of work (TimeoutError when timeout, else PeerError, naming
  /// its description and reason); every op in flight fails, later ops fail at once. Thread-safe.
  void abortFor(const Work* work, const std::string& reason, bool timeout);
  /// Takes back an end event of a finished Work for reuse. Thread-safe.
  void recycleEvent(cudaEvent_t event);

 private:
  void abortLocked(const Work* work, const std::string& reason, bool timeout);
  // Polls ncclCommGetAsyncError until the last call left ncclInProgress; throws (after aborting)
  // on an error or at deadline.
  void waitReadyLocked(std::chrono::steady_clock::time_point deadline, const std::string& what);
  void pollLocked();
  void watchdogLoop();

  int device_;
  int rank_;
  int size_;
  std::string what_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // recorded on the caller's stream, waited on by stream_
  mutable std::mutex mutex_;
  std::vector<std::shared_ptr<NcclWork>> pending_;
  // Own mutex: a Work's destructor returns its event, also while mutex_ is held (a finished
  // Work whose last owner was pending_).
  std::mutex events_mutex_;
  std::vector<cudaEvent_t> free_events_;
  std::string broken_;  // why the communicator was aborted; empty while healthy
  bool stop_ = false;
  std::condition_variable cv_;
  std::thread watchdog_;
};

}  // namespace lockstep::comm::nccl
