#pragma once
// A caching host allocator: 64-byte aligned blocks, kept on per-size free lists after release so a
// steady training loop, which asks for the same sizes every step, stops calling malloc after its
// first step. Thread-safe.
#include <cstddef>
#include <cstdint>

namespace lockstep {

struct AllocatorStats {
  uint64_t system_allocs = 0;  // blocks obtained from the system
  uint64_t cache_hits = 0;     // requests served from the free lists
  size_t bytes_in_use = 0;     // bytes handed out and not yet returned
  size_t bytes_cached = 0;     // bytes held on free lists
  size_t peak_bytes_in_use = 0;
};

class CachingAllocator {
 public:
  static constexpr size_t kAlignment = 64;
  /// The process-wide allocator.
  static CachingAllocator& instance();

  /// A block of at least nbytes (rounded up to a size class), 64-byte aligned. nbytes may be 0.
  void* allocate(size_t nbytes);
  /// Returns a block from allocate(); nbytes must be the size that was asked for.
  void release(void* ptr, size_t nbytes);
  /// Returns every cached block to the system.
  void emptyCache();
  AllocatorStats stats() const;

  /// The size class a request of nbytes is served from.
  static size_t roundSize(size_t nbytes);

  struct Impl;  // defined in allocator.cpp

 private:
  CachingAllocator() = default;
  ~CachingAllocator();
  Impl* impl();
  const Impl* impl() const;
};

}  // namespace lockstep
