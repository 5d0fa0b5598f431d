#pragma once
// A caching allocator for GPU memory, one per device, after PyTorch's CUDACachingAllocator: blocks
// come from cudaMalloc once and are kept on free lists by size class after release, so a steady
// training loop stops calling cudaMalloc (which synchronises the device) after its first step.
//
// Streams: a block belongs to the stream it was allocated on, and a release makes it reusable at
// once on that stream (the stream orders the old and the new use). A block that another stream used
// too (recordStream) is reused only after events recorded on those streams at release have
// completed. Out of memory: the cache is emptied and the request tried again; then an
// OutOfMemoryError names the request, the device and the statistics.
//
// Thread-safety: all calls are thread-safe.
#include <cstddef>
#include <cstdint>
#include <string>

#include "lockstep/tensor/cuda/runtime.h"
#include "lockstep/util/error.h"

namespace lockstep::cuda {

/// torch.cuda.memory_stats's main counters ("allocated_bytes.all.current" = allocated_current, ...).
struct MemoryStats {
  size_t allocated_current = 0;  // bytes in blocks handed out
  size_t allocated_peak = 0;
  size_t reserved_current = 0;  // bytes obtained with cudaMalloc (handed out + cached)
  size_t reserved_peak = 0;
  uint64_t allocations = 0;    // allocate() calls ("allocation.all.allocated")
  uint64_t cuda_mallocs = 0;   // of those, served by cudaMalloc ("segment.all.allocated")
  uint64_t alloc_retries = 0;  // cudaMalloc failures cured by emptying the cache ("num_alloc_retries")
  uint64_t ooms = 0;           // requests that failed even after that ("num_ooms")
};

/// The GPU ran out of memory (util/error.h's, for the host too).
using OutOfMemoryError = ::lockstep::OutOfMemoryError;

class CudaCachingAllocator {
 public:
  /// The allocator of device (created on first use).
  static CudaCachingAllocator& forDevice(int device);

  /// At least nbytes (rounded to a size class, 512-byte aligned) usable on stream. nbytes may be 0.
  void* allocate(size_t nbytes, const Stream& stream);
  /// Gives back a block from allocate(); its uses on other streams are waited for (recordStream).
  void release(void* ptr);
  /// Marks a block as used on stream s too (a communication stream), as torch's record_stream.
  void recordStream(void* ptr, const Stream& s);
  /// cudaFree of every cached block not in use (after waiting for their pending events), but the
  /// pools of live CUDA graphs (their replays write those blocks); nothing while a graph is captured.
  void emptyCache();
  MemoryStats stats() const;
  /// Zeroes the peaks (torch.cuda.reset_peak_memory_stats).
  void resetPeakStats();

  /// CUDA graph capture (cuda/graph.h): from here until endPool(), allocations on stream come
  /// from private pool `pool` (> 0), and a block of that pool goes back to it when released, so
  /// that nothing outside the graph is ever handed memory the graph's replays write. releasePool
  /// gives the pool's free blocks back to the general cache (its live blocks follow when released).
  void beginPool(int pool, const Stream& stream);
  void endPool();
  void releasePool(int pool);
  /// From pausePool() until resumePool() (or endPool()), allocations come from the general cache
  /// even on the capturing stream: for the tensors a capture makes that the host writes between
  /// replays (a captured update's scalars). From the pool, such a tensor could share a block with
  /// a temporary the graph freed earlier in the step, which each replay would then overwrite after
  /// the host's write.
  void pausePool();
  void resumePool();
  int device() const { return device_; }

  struct Impl;

 private:
  explicit CudaCachingAllocator(int device);
  ~CudaCachingAllocator();
  int device_;
  Impl* impl_;
};

/// pausePool() on device's allocator for a scope.
class PoolPause {
 public:
  explicit PoolPause(int device) : alloc_(CudaCachingAllocator::forDevice(device)) { alloc_.pausePool(); }
  ~PoolPause() { alloc_.resumePool(); }
  PoolPause(const PoolPause&) = delete;
  PoolPause& operator=(const PoolPause&) = delete;

 private:
  CudaCachingAllocator& alloc_;
};

/// Host memory pinned with cudaHostAlloc (for asynchronous copies): a block of nbytes, and its free.
void* allocatePinned(size_t nbytes);
void freePinned(void* p);

}  // namespace lockstep::cuda
