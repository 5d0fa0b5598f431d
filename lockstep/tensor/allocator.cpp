#include "lockstep/tensor/allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace lockstep {

struct CachingAllocator::Impl {
  struct FreeList {
    std::vector<void*> blocks;
    uint64_t last_use = 0;    // the request count when this size was last asked for
    bool given_back = false;  // a block of this size was unmapped to make room
  };
  mutable std::mutex mu;
  std::map<size_t, FreeList> free_lists;
  AllocatorStats stats;
  uint64_t requests = 0;
  size_t large_cached = 0;  // of stats.bytes_cached, in classes above kLargeBlock
  size_t slack = 0;         // held allowed past the high-water mark (see allocate)
};

namespace {
CachingAllocator::Impl& state() {
  // Leaked on purpose: tensors in static storage may be released during exit.
  static auto* s = new CachingAllocator::Impl();
  return *s;
}

bool isLarge(size_t size) { return size > CachingAllocator::kLargeBlock; }

void* systemAlloc(size_t size) {
  if (!isLarge(size)) return std::aligned_alloc(CachingAllocator::kAlignment, size);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void systemFree(void* p, size_t size) {
  if (isLarge(size)) {
    ::munmap(p, size);
  } else {
    std::free(p);
  }
}

void noteInUse(AllocatorStats& st, size_t size) {
  st.bytes_in_use += size;
  st.peak_bytes_in_use = std::max(st.peak_bytes_in_use, st.bytes_in_use);
  st.peak_bytes_held = std::max(st.peak_bytes_held, st.bytes_in_use + st.bytes_cached);
}
}  // namespace

CachingAllocator& CachingAllocator::instance() {
  static CachingAllocator a;
  return a;
}

CachingAllocator::~CachingAllocator() = default;
CachingAllocator::Impl* CachingAllocator::impl() { return &state(); }
const CachingAllocator::Impl* CachingAllocator::impl() const { return &state(); }

size_t CachingAllocator::roundSize(size_t nbytes) {
  if (nbytes <= kAlignment) return kAlignment;
  // Below 1 MiB: next power of two (few classes, high reuse). Above: multiples of 1/16 of the
  // power of two, bounding waste at 12.5% (of address space: the tail of a mapped block that is
  // never touched takes no memory).
  size_t p = kAlignment;
  while (p < nbytes) p <<= 1;
  if (p <= kLargeBlock) return p;
  size_t step = p / 16;
  return (nbytes + step - 1) / step * step;
}

OutOfMemoryError CachingAllocator::outOfMemory(size_t nbytes) const {
  const AllocatorStats st = stats();
  return OutOfMemoryError(detail::concat(
      "host out of memory: tried to allocate ", nbytes >> 20, " MiB (", nbytes, " bytes; lockstep holds ",
      st.bytes_in_use >> 20,
      " MiB in tensors). Lower the batch size, the size of data held in memory (a "
      "synthetic dataset's samples, a corpus) or the model, use bf16, or run where more memory is free"));
}

void* CachingAllocator::allocate(size_t nbytes) {
  // No machine has 2^62 bytes (and rounding such a size up would overflow).
  if (nbytes > (size_t{1} << 62)) throw outOfMemory(nbytes);
  const size_t size = roundSize(nbytes);
  Impl& s = *impl();
  std::vector<std::pair<void*, size_t>> give_back;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Impl::FreeList& own = s.free_lists[size];
    own.last_use = ++s.requests;
    if (!own.blocks.empty()) {
      void* p = own.blocks.back();
      own.blocks.pop_back();
      s.stats.cache_hits++;
      s.stats.bytes_cached -= size;
      if (isLarge(size)) s.large_cached -= size;
      noteInUse(s.stats, size);
      return p;
    }
    if (isLarge(size)) {
      // A size given back once and asked for again takes turns with others at the peak (a loop
      // would unmap and map them every step): from then on one more block may be held past the
      // mark, each time this happens, up to a quarter of the mark (mixed precision's casts take
      // turns with the f32 blocks they come from, a block of each per layer). Sizes of a phase
      // that is over never come back, so they never add to it.
      if (own.given_back) {
        s.slack = std::max(size, std::min(s.slack + size, s.stats.peak_bytes_in_use / 4));
        own.given_back = false;
      }
      // Room within the high-water mark: give back cached large blocks, least recently asked-for
      // size first, until in use + cached + this block fits (or nothing large is cached).
      const size_t mark = std::max(s.stats.peak_bytes_in_use, s.stats.bytes_in_use + size) + s.slack;
      while (s.large_cached > 0 && s.stats.bytes_in_use + s.stats.bytes_cached + size > mark) {
        auto victim = s.free_lists.end();
        for (auto it = s.free_lists.upper_bound(kLargeBlock); it != s.free_lists.end(); ++it) {
          if (!it->second.blocks.empty() &&
              (victim == s.free_lists.end() || it->second.last_use < victim->second.last_use)) {
            victim = it;
          }
        }
        give_back.emplace_back(victim->second.blocks.back(), victim->first);
        victim->second.given_back = true;
        victim->second.blocks.pop_back();
        s.stats.bytes_cached -= victim->first;
        s.large_cached -= victim->first;
        s.stats.system_frees++;
      }
    }
  }
  for (auto [p, sz] : give_back) systemFree(p, sz);
  void* p = systemAlloc(size);
  if (p == nullptr) {
    emptyCache();
    p = systemAlloc(size);
    if (p == nullptr) throw outOfMemory(nbytes);
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.system_allocs++;
  noteInUse(s.stats, size);
  return p;
}

void CachingAllocator::release(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  const size_t size = roundSize(nbytes);
  Impl& s = *impl();
  std::lock_guard<std::mutex> lock(s.mu);
  s.free_lists[size].blocks.push_back(ptr);
  s.stats.bytes_in_use -= size;
  s.stats.bytes_cached += size;
  if (isLarge(size)) s.large_cached += size;
}

void CachingAllocator::emptyCache() {
  Impl& s = *impl();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& [size, list] : s.free_lists) {
    for (void* p : list.blocks) systemFree(p, size);
    s.stats.bytes_cached -= size * list.blocks.size();
    s.stats.system_frees += list.blocks.size();
    list.blocks.clear();
  }
  s.free_lists.clear();
  s.large_cached = 0;
}

AllocatorStats CachingAllocator::stats() const {
  const Impl& s = *impl();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

}  // namespace lockstep
