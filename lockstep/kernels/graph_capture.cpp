#include "lockstep/kernels/graph_capture.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/runtime.h"
#endif

namespace lockstep::kernels {

bool isCapturingGraph(const Device& device) {
#if LOCKSTEP_WITH_CUDA
  if (!device.isCuda()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  LOCKSTEP_CUDA_CHECK(cudaStreamIsCapturing(::lockstep::cuda::currentStream(device.index).handle(), &status));
  return status != cudaStreamCaptureStatusNone;
#else
  (void)device;
  return false;
#endif
}

}  // namespace lockstep::kernels
