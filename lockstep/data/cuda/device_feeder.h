#pragma once
// The DataLoader's last leg to a GPU (built with CUDA only): batches are copied into pinned host
// memory by the loader's worker threads, then to the device on a side stream one batch ahead of
// the training loop, so that the copy of batch k+1 overlaps the compute of batch k (what torch's
// pin_memory=True plus .cuda(non_blocking=True) under a prefetching stream does).
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "lockstep/data/example.h"
#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::data {

/// Page-locked host buffers, reused: cudaHostAlloc is slow and cudaFreeHost waits for the whole
/// device, so neither may run per batch. A buffer goes back to the pool when the last tensor using
/// it is gone. Thread-safe (the loader's workers take buffers at once); the pool lives as long as
/// any of its buffers.
class PinnedBufferPool : public std::enable_shared_from_this<PinnedBufferPool> {
 public:
  ~PinnedBufferPool();
  /// A host tensor of t's shape and dtype in pinned memory holding t's values, in t's layout when t
  /// is dense (an NHWC batch stays NHWC), row-major otherwise (t on the host).
  Tensor pinnedCopy(const Tensor& t);
  /// Buffers made so far (they are reused; the count stops growing in a steady loop).
  size_t buffersMade() const;

 private:
  struct Buffer {
    void* data;
    size_t nbytes;
  };
  mutable std::mutex mu_;
  std::vector<Buffer> free_;
  size_t made_ = 0;

  Buffer take(size_t nbytes);
  void give(Buffer b);
};

/// Copies pinned host batches to one GPU on a side stream, a batch ahead. Used from the loader's
/// consuming thread only (not thread-safe).
class DeviceFeeder {
 public:
  explicit DeviceFeeder(Device device);
  ~DeviceFeeder();
  DeviceFeeder(const DeviceFeeder&) = delete;
  DeviceFeeder& operator=(const DeviceFeeder&) = delete;

  /// For the worker threads: b's input and target in pinned host memory. Thread-safe.
  Batch pin(const Batch& b) const;
  /// Starts copying host (pinned: asynchronous) to the device on the side stream; the batch
  /// before it must have been taken.
  void stage(Batch host);
  bool staged() const { return ahead_.has_value(); }
  /// Drops the staged batch (a pass stopped early), after its copy is done.
  void clear();
  /// The staged batch on the device: the current stream waits (on the GPU) for its copy, so work
  /// queued after this reads the copied values.
  Batch take();

 private:
  struct InFlight {
    Batch host;    // kept until the copy has read it
    Batch device;  // allocated on the compute stream, written on the side stream
    cuda::Event copied;
  };
  Device device_;
  cuda::Stream side_;
  std::shared_ptr<PinnedBufferPool> pool_;
  std::optional<InFlight> ahead_;     // being copied
  std::optional<InFlight> previous_;  // handed out; its host buffers go back once its copy is done

  Tensor toDevice(const Tensor& host);
};

}  // namespace lockstep::data
