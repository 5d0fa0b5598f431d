#pragma once
// The CUDA runtime as lockstep uses it: error checking, the current device and stream as scoped
// state (torch.cuda.device / torch.cuda.stream), events. Built only with LOCKSTEP_CUDA; code outside
// lockstep/*/cuda/ reaches it through Device and Tensor, never directly.
//
// Streams: every device has a default stream of lockstep's own (non-blocking with respect to the
// legacy NULL stream) that kernels run on unless a StreamGuard names another. Thread-safety: the
// current stream and device are per thread, as in PyTorch.
#include <cuda_runtime_api.h>

#include <string>

#include "lockstep/util/error.h"

namespace lockstep::cuda {

/// Throws for a CUDA runtime error: OutOfMemory-like errors and bad launches alike become an Error
/// naming the call (what) and cudaGetErrorString.
void throwCudaError(cudaError_t err, const char* what, const char* file, int line);

int deviceCount();
/// NotSupportedError naming cuda:index and why it cannot be used here.
void checkDevice(int index);
/// "NVIDIA H100 80GB HBM3, sm_90, driver 13.0, runtime 13.0".
std::string describeDevice(int index);

/// The device this thread's CUDA calls go to.
int currentDevice();
void setCurrentDevice(int index);

/// A borrowed or owned stream on one device. The default-constructed Stream is device 0's default.
class Stream {
 public:
  Stream() = default;
  Stream(int device, cudaStream_t handle) : device_(device), handle_(handle) {}
  int device() const { return device_; }
  cudaStream_t handle() const { return handle_; }
  /// Blocks the host until the work queued so far on this stream has finished.
  void synchronize() const;
  bool operator==(const Stream&) const = default;

 private:
  int device_ = 0;
  cudaStream_t handle_ = nullptr;
};

/// lockstep's default stream of the device (created once, non-blocking, lives for the process).
Stream defaultStream(int device);
/// A stream from a small per-device pool (created once, reused round robin): for communication
/// and copies that should overlap compute.
Stream streamFromPool(int device, bool high_priority = false);
/// The stream this thread queues work on for device (default: defaultStream).
Stream currentStream(int device);
inline Stream currentStream() { return currentStream(currentDevice()); }

/// Sets the current device for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

/// Makes s the current stream of its device (and its device current) for the scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  DeviceGuard device_;
};

/// A CUDA event (timing off unless asked): record on one stream, make another wait on it.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& s);
  /// Makes s wait (on the GPU, not the host) for the work recorded.
  void block(const Stream& s) const;
  bool query() const;
  void synchronize() const;
  /// Milliseconds between two timing events that have completed.
  float elapsedMs(const Event& end) const;
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = -1;
};

}  // namespace lockstep::cuda

#define LOCKSTEP_CUDA_CHECK(expr)                                                      \
  do {                                                                                 \
    cudaError_t lockstep_cuda_err_ = (expr);                                           \
    if (lockstep_cuda_err_ != cudaSuccess)                                             \
      ::lockstep::cuda::throwCudaError(lockstep_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)
