#include "lockstep/comm/nccl/nccl_comm.h"

#include <algorithm>

#include "lockstep/comm/nccl/nccl_util.h"
#include "lockstep/util/error.h"

namespace lockstep::comm::nccl {

using ::lockstep::detail::concat;
using Clock = std::chrono::steady_clock;

namespace {
// How often the watchdog looks at the ops in flight: errors and timeouts surface this late at most.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(10);
}  // namespace

NcclComm::NcclComm(int device, int rank, int size, const ncclUniqueId& id, std::chrono::milliseconds timeout,
                   std::string what)
    : device_(device), rank_(rank), size_(size), what_(std::move(what)) {
  DeviceGuard guard(device_);
  checkCuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), what_ + ": cudaStreamCreate");
  checkCuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), what_ + ": cudaEventCreate");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const std::string init =
      concat(what_, ": creating the NCCL communicator (rank ", rank, " of ", size, " on cuda:", device, ")");
  ncclResult_t r = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    std::string text = ncclErrorText(r, comm_);
    if (comm_ != nullptr) (void)ncclCommAbort(comm_);
    (void)cudaEventDestroy(ready_);
    (void)cudaStreamDestroy(stream_);
    throw PeerError(concat(init, " failed: ", text));
  }
  try {
    std::lock_guard lock(mutex_);
    waitReadyLocked(Clock::now() + timeout, init);
  } catch (const TimeoutError&) {
    (void)cudaEventDestroy(ready_);
    (void)cudaStreamDestroy(stream_);
    throw TimeoutError(
        concat(init, " timed out after ", timeout.count(),
               " ms: not every rank joined (each rank must create its group with backend nccl, "
               "the same store and world size, on its own GPU); the communicator was aborted"));
  } catch (...) {
    (void)cudaEventDestroy(ready_);
    (void)cudaStreamDestroy(stream_);
    throw;
  }
  watchdog_ = std::thread([this] { watchdogLoop(); });
}

NcclComm::~NcclComm() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  // Ops in flight end by their deadlines at the latest.
  while (true) {
    {
      std::lock_guard lock(mutex_);
      pollLocked();
      if (pending_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  DeviceGuard guard(device_, std::nothrow);
  if (broken_.empty()) {
    // Non-blocking communicator: finalize (flushes its work), wait for it, then free it.
    if (ncclCommFinalize(comm_) == ncclInProgress) {
      ncclResult_t state = ncclInProgress;
      auto until = Clock::now() + std::chrono::seconds(30);
      while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
             Clock::now() < until)
        std::this_thread::yield();
      if (state != ncclSuccess)
        (void)ncclCommAbort(comm_);
      else
        (void)ncclCommDestroy(comm_);
    } else {
      (void)ncclCommDestroy(comm_);
    }
  }  // an aborted communicator is already freed
  {
    std::lock_guard events_lock(events_mutex_);
    for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
    free_events_.clear();
  }
  (void)cudaEventDestroy(ready_);
  (void)cudaStreamDestroy(stream_);
}

void NcclComm::waitReadyLocked(Clock::time_point deadline, const std::string& what) {
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) state = r;
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      std::string reason = concat("NCCL error: ", ncclErrorText(state, comm_));
      abortLocked(nullptr, reason, false);
      throw PeerError(concat(what, ": ", reason, "; the communicator was aborted"));
    }
    if (Clock::now() >= deadline) {
      std::string reason = "timed out while NCCL was still setting up the call";
      abortLocked(nullptr, reason, true);
      throw TimeoutError(concat(what, ": ", reason, "; the communicator was aborted (ncclCommAbort)"));
    }
    if (polls < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
}

std::shared_ptr<Work> NcclComm::launch(const std::string& description, const OpContext& ctx,
                                       cudaStream_t caller, bool host_blocking, const Call& call) {
  std::lock_guard lock(mutex_);
  if (!broken_.empty()) {
    auto failed = std::make_shared<Work>(description);
    failed->finish(std::make_exception_ptr(PeerError(
        concat(description, ": not run because the NCCL communicator was aborted earlier: ", broken_,
               "; create a new process group"))));
    return failed;
  }
  DeviceGuard guard(device_);
  checkCuda(cudaEventRecord(ready_, caller), description + ": cudaEventRecord on the caller's stream");
  checkCuda(cudaStreamWaitEvent(stream_, ready_, 0), description + ": cudaStreamWaitEvent");
  ncclResult_t r = call(comm_, stream_);
  if (r != ncclSuccess && r != ncclInProgress) {
    std::string reason = concat("NCCL error: ", ncclErrorText(r, comm_));
    abortLocked(nullptr, concat(description, ": ", reason), false);
    throw PeerError(concat(description, ": ", reason, "; the communicator was aborted"));
  }
  if (r == ncclInProgress) waitReadyLocked(ctx.deadline, description);
  cudaEvent_t end = nullptr;
  {
    std::lock_guard events_lock(events_mutex_);
    if (!free_events_.empty()) {
      end = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (end == nullptr) {
    checkCuda(cudaEventCreateWithFlags(&end, cudaEventDisableTiming), description + ": cudaEventCreate");
  }
  cudaError_t recorded = cudaEventRecord(end, stream_);
  if (recorded != cudaSuccess) (void)cudaEventDestroy(end);
  checkCuda(recorded, description + ": cudaEventRecord on the communication stream");
  auto work = std::make_shared<NcclWork>(description, weak_from_this(), device_, caller, end, ctx.deadline,
                                         host_blocking);
  pending_.push_back(work);
  return work;
}

void NcclComm::pollAll() {
  std::lock_guard lock(mutex_);
  pollLocked();
}

void NcclComm::pollLocked() {
  if (pending_.empty()) return;
  DeviceGuard guard(device_, std::nothrow);
  // Ops complete in issue order on the one stream: finish the done prefix.
  size_t done = 0;
  cudaError_t e = cudaSuccess;
  for (; done < pending_.size(); ++done) {
    e = cudaEventQuery(pending_[done]->endEvent());
    if (e != cudaSuccess) break;
    pending_[done]->finish();
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
  if (e != cudaSuccess && e != cudaErrorNotReady) {
    abortLocked(pending_.front().get(),
                concat("CUDA error ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"), false);
    return;
  }
  if (pending_.empty()) return;
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r != ncclSuccess) state = r;
  if (state != ncclSuccess && state != ncclInProgress) {
    abortLocked(pending_.front().get(), concat("NCCL asynchronous error: ", ncclErrorText(state, comm_)),
                false);
    return;
  }
  const auto now = Clock::now();
  for (const auto& w : pending_) {
    if (now >= w->deadline()) {
      abortLocked(w.get(), "timed out (the op's timeout): a peer did not take part or is stuck", true);
      return;
    }
  }
}

void NcclComm::abortFor(const Work* work, const std::string& reason, bool timeout) {
  std::lock_guard lock(mutex_);
  if (!broken_.empty()) return;
  // Not aborting for an op that completed meanwhile.
  bool in_flight =
      std::any_of(pending_.begin(), pending_.end(), [&](const auto& w) { return w.get() == work; });
  if (in_flight) abortLocked(work, reason, timeout);
}

void NcclComm::abortLocked(const Work* work, const std::string& reason, bool timeout) {
  const std::string why = work != nullptr ? concat(work->description(), ": ", reason) : reason;
  if (broken_.empty()) {
    broken_ = why;
    DeviceGuard guard(device_, std::nothrow);
    // Makes NCCL's kernels in flight return, so the end events complete and the stream drains.
    (void)ncclCommAbort(comm_);
  }
  const std::string tail =
      concat("; the NCCL communicator of rank ", rank_, " of ", size_, " (cuda:", device_,
             ") was aborted (ncclCommAbort) and this process group is broken");
  for (const auto& w : pending_) {
    std::string message = w.get() == work ? concat(w->description(), ": ", reason, tail)
                                          : concat(w->description(), ": not completed because ", why, tail);
    if (timeout) {
      w->finish(std::make_exception_ptr(TimeoutError(message)));
    } else {
      w->finish(std::make_exception_ptr(PeerError(message)));
    }
  }
  pending_.clear();
}

void NcclComm::recycleEvent(cudaEvent_t event) {
  std::lock_guard lock(events_mutex_);
  free_events_.push_back(event);
}

void NcclComm::watchdogLoop() {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    cv_.wait_for(lock, kWatchdogPeriod, [&] { return stop_; });
    if (stop_) break;
    try {
      pollLocked();
    } catch (const std::exception& e) {  // nothing may escape the thread; fail the ops instead
      if (!pending_.empty()) abortLocked(pending_.front().get(), concat("watchdog: ", e.what()), false);
    }
  }
}

}  // namespace lockstep::comm::nccl
