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

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  bool owned_ = true;
  std::function<void(void*)> deleter_;
};

}  // namespace lockstep
