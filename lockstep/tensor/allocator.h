#pragma once
// A caching host allocator: 64-byte aligned blocks, kept on per-size free lists after release so a
// steady training loop, which asks for the same sizes every step, stops calling the system after
// its first step. Thread-safe.
//
// Blocks above 1 MiB (kLargeBlock) are mapped and unmapped directly (mmap), and the cache does not
// make the process hold more than its high-water mark of bytes in use: when a large request misses
// its free list and serving it would take bytes in use plus bytes cached past that mark, cached
// large blocks are unmapped first, those of the size least recently asked for first. A size that
// a phase used once (setup, initialisation, a checkpoint) therefore gives its memory back to the
// sizes training asks for, instead of holding it for the rest of the run. A size given back and
// asked for again (sizes taking turns at the peak of every step) lets the cache hold one more block
// past the mark from then on, each time, up to a quarter of the mark: a steady loop stops mapping
// and unmapping them after a few steps.
#include <cstddef>
#include <cstdint>

#include "lockstep/util/error.h"

namespace lockstep {

struct AllocatorStats {
  uint64_t system_allocs = 0;  // blocks obtained from the system
  uint64_t system_frees = 0;   // cached blocks given back to make room (and by emptyCache)
  uint64_t cache_hits = 0;     // requests served from the free lists
  size_t bytes_in_use = 0;     // bytes handed out and not yet returned
  size_t bytes_cached = 0;     // bytes held on free lists
  size_t peak_bytes_in_use = 0;
  size_t peak_bytes_held = 0;  // the high-water mark of in use + cached
};

class CachingAllocator {
 public:
  static constexpr size_t kAlignment = 64;
  /// Size classes above this are mapped directly and may be given back to make room.
  static constexpr size_t kLargeBlock = size_t{1} << 20;
  /// The process-wide allocator.
  static CachingAllocator& instance();

  /// A block of at least nbytes (rounded up to a size class), 64-byte aligned. nbytes may be 0.
  /// OutOfMemoryError (util/error.h) naming the request when the system has no memory for it,
  /// once the cache has been given back.
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
  OutOfMemoryError outOfMemory(size_t nbytes) const;
};

}  // namespace lockstep
