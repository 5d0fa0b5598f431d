#pragma once
// A tensor's bytes and the device they live on. Owned storage comes from the device's caching
// allocator (CachingAllocator on the host, cuda::CudaCachingAllocator on a GPU, allocated on the
// device's current stream); borrowed storage wraps memory somebody else owns (a memory-mapped file,
// a communication bucket, pinned host memory) and a deleter.
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "lockstep/tensor/device.h"

namespace lockstep {

class Storage {
 public:
  /// nbytes of fresh, uninitialised, 64-byte aligned memory on device; inside a DeferredInit scope
  /// (tensor/deferred_init.h) no memory yet: the storage is deferred (below).
  explicit Storage(size_t nbytes, Device device = Device::cpu());
  /// Borrowed memory on device; deleter (may be empty) runs when the last tensor using it goes away.
  Storage(void* data, size_t nbytes, std::function<void(void*)> deleter, Device device = Device::cpu());
  /// nbytes of host memory pinned with cudaHostAlloc (NotSupportedError without CUDA).
  static std::shared_ptr<Storage> pinnedHost(size_t nbytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }

  /// Owned storage only: gives the memory back and keeps the size, so that every tensor sharing
  /// this storage (views, the copies autograd saved for backward) stays valid but must not be read
  /// until materialize() (ZeRO stage 3 frees a parameter's bytes between uses, as PyTorch FSDP
  /// resizes a parameter's storage to 0). Tensor::dataPtr() refuses a released storage.
  void release();
  /// Fresh, uninitialised memory of nbytes() again after release(); nothing when resident. A
  /// deferred storage gets its memory and then its recorded fills, in the order they were written.
  void materialize();
  bool resident() const { return !released_; }

  /// Created in a DeferredInit scope and not used since: no memory, only recorded fills. release()
  /// leaves it so; materialize() (also called by the first data access) ends it.
  bool deferred() const { return deferred_; }
  /// Records a write to replay when a deferred storage is materialised: `write` gets its memory.
  void deferWrite(std::function<void(void* data)> write);

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  bool owned_ = true;
  bool released_ = false;
  bool pinned_ = false;
  bool deferred_ = false;
  std::vector<std::function<void(void*)>> deferred_writes_;
  std::function<void(void*)> deleter_;
  Device device_;
};

}  // namespace lockstep
