#pragma once
// CUDA and NCCL plumbing for the nccl backend: return codes wrapped into exceptions at the call
// site (CONVENTIONS.md), lockstep's dtypes and reduce ops in NCCL's terms, and a device guard.
// comm/ depends on util only, so this does not use lockstep/tensor/cuda/runtime.h.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <new>
#include <string>

#include "lockstep/comm/reduce_op.h"
#include "lockstep/util/dtype.h"

namespace lockstep::comm::nccl {

/// InternalError naming what and CUDA's message unless err is cudaSuccess.
void checkCuda(cudaError_t err, const std::string& what);
/// PeerError naming what, NCCL's error string and its last error text (for comm, when given)
/// unless r is ncclSuccess or ncclInProgress.
void checkNccl(ncclResult_t r, const std::string& what, ncclComm_t comm = nullptr);
/// "unhandled system error (NCCL: <last error>)": r in words, for messages.
std::string ncclErrorText(ncclResult_t r, ncclComm_t comm);

ncclDataType_t toNccl(DType dtype);
/// avg is NCCL's ncclAvg (NCCL >= 2.10).
ncclRedOp_t toNccl(ReduceOp op);

/// Number of visible CUDA devices; 0 (not an error) when there is no GPU or no driver.
int visibleDeviceCount();
/// ValueError saying that backend nccl needs a GPU and what to use instead, unless this process
/// sees one (the group checks it, and so does a launcher before it starts any rank).
void requireVisibleDevice();

/// Makes device current for a scope and restores the previous one. InternalError when CUDA
/// cannot; the nothrow form (for destructors and the watchdog) leaves the current device as is then.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  DeviceGuard(int device, std::nothrow_t) noexcept;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace lockstep::comm::nccl
