#include "lockstep/comm/nccl/nccl_work.h"

#include <thread>

#include "lockstep/comm/nccl/nccl_comm.h"
#include "lockstep/comm/nccl/nccl_util.h"
#include "lockstep/util/error.h"

namespace lockstep::comm::nccl {

using ::lockstep::detail::concat;

NcclWork::NcclWork(std::string description, std::weak_ptr<NcclComm> comm, int device, cudaStream_t caller,
                   cudaEvent_t end, std::chrono::steady_clock::time_point deadline, bool host_blocking)
    : Work(std::move(description)),
      comm_(std::move(comm)),
      device_(device),
      caller_(caller),
      end_(end),
      deadline_(deadline),
      host_blocking_(host_blocking) {}

NcclWork::~NcclWork() {
  if (auto comm = comm_.lock()) {
    comm->recycleEvent(end_);
  } else {
    (void)cudaEventDestroy(end_);
  }
}

bool NcclWork::isCompleted() const {
  if (Work::isCompleted()) return true;
  if (auto comm = comm_.lock()) comm->pollAll();
  return Work::isCompleted();
}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  {
    DeviceGuard guard(device_);
    checkCuda(cudaStreamWaitEvent(caller_, end_, 0), concat(description(), ": cudaStreamWaitEvent"));
  }
  auto comm = comm_.lock();
  if (timeout < kForever || host_blocking_) {
    const auto start = std::chrono::steady_clock::now();
    const auto limit = start + timeout;
    for (int polls = 0; !isCompleted(); ++polls) {
      if (!comm) break;  // the group is gone; its destructor finished every op
      if (std::chrono::steady_clock::now() >= limit) {
        comm->abortFor(this, concat("Work::wait timed out after ", timeout.count(), " ms"), true);
        break;
      }
      // A small op is done in microseconds: yield first, then sleep so a long wait costs no core.
      if (polls < 200) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  } else if (comm) {
    comm->pollAll();
  }
  if (auto error = exception()) std::rethrow_exception(error);
}

}  // namespace lockstep::comm::nccl
