#pragma once
// The library handles behind lockstep's GPU kernels (built with LOCKSTEP_CUDA only): one cuBLASLt
// handle per device, one cuBLASLt workspace per stream, one cuDNN handle per device and thread;
// each created on first use and kept for the life of the process (a training step allocates none
// of them). Status codes from cuBLASLt and cuDNN become lockstep exceptions naming the op.
#include <cublasLt.h>
#include <cudnn.h>

#include <cstddef>
#include <string>

#include "lockstep/tensor/cuda/runtime.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::kernels::cuda {

/// Device d's cuBLASLt handle. Thread-safe (cuBLASLt handles may be shared between threads).
cublasLtHandle_t blasLtHandle(int device);

struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};
/// cuBLASLt's scratch for GEMMs queued on stream s (32 MiB from the device's caching allocator, taken
/// once per stream: two streams never share one). Thread-safe.
Workspace blasWorkspace(const ::lockstep::cuda::Stream& s);

/// The calling thread's cuDNN handle for s's device, set to queue on s (cuDNN handles are not to be
/// used by two threads at once, hence one per thread).
cudnnHandle_t dnnHandle(const ::lockstep::cuda::Stream& s);

/// Scratch of at least `bytes` for a cuDNN call on the current stream of `device` (from the caching
/// allocator: after the first step it is a free-list hit, never a cudaMalloc).
Tensor scratch(size_t bytes, const Device& device);

/// Throws Error (NotSupportedError for unsupported configurations) naming `what` (the op and its
/// shapes) and cuBLAS's status string.
[[noreturn]] void throwBlasError(cublasStatus_t status, const std::string& what);
/// The same for cuDNN statuses.
[[noreturn]] void throwDnnError(cudnnStatus_t status, const std::string& what);

/// ValueError naming op and both tensors unless every defined tensor lives on first's device.
void checkSameDevice(const char* op, const Tensor& first, const Tensor& second,
                     const Tensor& third = Tensor(), const Tensor& fourth = Tensor());

}  // namespace lockstep::kernels::cuda

/// `what` is only evaluated on failure (a std::string expression naming the op and shapes).
#define LOCKSTEP_CUBLAS_CHECK(expr, what)                                              \
  do {                                                                                 \
    cublasStatus_t lockstep_blas_status_ = (expr);                                     \
    if (lockstep_blas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                   \
      ::lockstep::kernels::cuda::throwBlasError(lockstep_blas_status_,                 \
                                                std::string(#expr) + " in " + (what)); \
  } while (0)

#define LOCKSTEP_CUDNN_CHECK(expr, what)                                                                    \
  do {                                                                                                      \
    cudnnStatus_t lockstep_dnn_status_ = (expr);                                                            \
    if (lockstep_dnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                          \
      ::lockstep::kernels::cuda::throwDnnError(lockstep_dnn_status_, std::string(#expr) + " in " + (what)); \
  } while (0)
