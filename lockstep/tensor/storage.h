#pragma once
// A tensor's bytes. Owned storage comes from the CachingAllocator; borrowed storage wraps memory
// somebody else owns (a memory-mapped file, a communication bucket) and a deleter.
#include <cstddef>
#include <functional>
#include <memory>

namespace lockstep {

class Storage {
 public:
  /// nbytes of fresh, uninitialised, 64-byte aligned memory.
  explicit Storage(size_t nbytes);
  /// Borrowed memory; deleter (may be empty) runs when the last tensor using it goes away.
  Storage(void* data, size_t nbytes, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }

  /// Owned storage only: gives the memory back and keeps the size, so that every tensor sharing
  /// this storage (views, the copies autograd saved for backward) stays valid but must not be read
  /// until materialize() (ZeRO stage 3 frees a parameter's bytes between uses, as PyTorch FSDP
  /// resizes a parameter's storage to 0). Tensor::dataPtr() refuses a released storage.
  void release();
  /// Fresh, uninitialised memory of nbytes() again after release(); nothing when resident.
  void materialize();
  bool resident() const { return !released_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  bool owned_ = true;
  bool released_ = false;
  std::function<void(void*)> deleter_;
};

}  // namespace lockstep
