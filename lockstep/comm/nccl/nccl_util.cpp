#include "lockstep/comm/nccl/nccl_util.h"

#include "lockstep/util/error.h"

namespace lockstep::comm::nccl {

using ::lockstep::detail::concat;

void checkCuda(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return;
  throw InternalError(
      concat(what, ": CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"));
}

std::string ncclErrorText(ncclResult_t r, ncclComm_t comm) {
  std::string text = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') text += concat(" (NCCL: ", last, ")");
  return text;
}

void checkNccl(ncclResult_t r, const std::string& what, ncclComm_t comm) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  throw PeerError(concat(what, ": NCCL error: ", ncclErrorText(r, comm)));
}

ncclDataType_t toNccl(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  throw ValueError(concat("backend nccl: unknown dtype ", static_cast<int>(dtype)));
}

ncclRedOp_t toNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::product:
      return ncclProd;
  }
  throw ValueError(concat("backend nccl: unknown reduce op ", static_cast<int>(op)));
}

int visibleDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: clear the sticky-free error, report none
    return 0;
  }
  return n;
}

void requireVisibleDevice() {
  LOCKSTEP_ENFORCE(visibleDeviceCount() > 0, ValueError,
                   "backend nccl needs a CUDA GPU, but this process sees none (no device, no driver, or "
                   "CUDA_VISIBLE_DEVICES hides them); use backend gloo or shm to train on CPUs");
}

DeviceGuard::DeviceGuard(int device) {
  checkCuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) checkCuda(cudaSetDevice(device), concat("cudaSetDevice(", device, ")"));
}

DeviceGuard::DeviceGuard(int device, std::nothrow_t) noexcept {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    previous_ = -1;
    return;
  }
  if (previous_ != device) (void)cudaSetDevice(device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ < 0) return;
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
}

}  // namespace lockstep::comm::nccl
