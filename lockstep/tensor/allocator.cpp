#include "lockstep/tensor/allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace lockstep {

struct CachingAllocator::Impl {
  mutable std::mutex mu;
  std::map<size_t, std::vector<void*>> free_lists;
  AllocatorStats stats;
};

namespace {
CachingAllocator::Impl& state() {
  // Leaked on purpose: tensors in static storage may be released during exit.
  static auto* s = new CachingAllocator::Impl();
  return *s;
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
  // Below 1 MiB: next power of two (few classes, high reuse). Above: multiples of 1/8 of the
  // power of two, bounding waste at 12.5%.
  size_t p = kAlignment;
  while (p < nbytes) p <<= 1;
  if (p <= (1u << 20)) return p;
  size_t step = p / 16;
  return (nbytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(size_t nbytes) {
  size_t size = roundSize(nbytes);
  Impl& s = *impl();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.free_lists.find(size);
    if (it != s.free_lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      s.stats.cache_hits++;
      s.stats.bytes_cached -= size;
      s.stats.bytes_in_use += size;
      if (s.stats.bytes_in_use > s.stats.peak_bytes_in_use) s.stats.peak_bytes_in_use = s.stats.bytes_in_use;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, size);
  if (p == nullptr) {
    emptyCache();
    p = std::aligned_alloc(kAlignment, size);
    if (p == nullptr) throw std::bad_alloc();
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.system_allocs++;
  s.stats.bytes_in_use += size;
  if (s.stats.bytes_in_use > s.stats.peak_bytes_in_use) s.stats.peak_bytes_in_use = s.stats.bytes_in_use;
  return p;
}

void CachingAllocator::release(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  size_t size = roundSize(nbytes);
  Impl& s = *impl();
  std::lock_guard<std::mutex> lock(s.mu);
  s.free_lists[size].push_back(ptr);
  s.stats.bytes_in_use -= size;
  s.stats.bytes_cached += size;
}

void CachingAllocator::emptyCache() {
  Impl& s = *impl();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& [size, list] : s.free_lists) {
    for (void* p : list) std::free(p);
    s.stats.bytes_cached -= size * list.size();
    list.clear();
  }
  s.free_lists.clear();
}

AllocatorStats CachingAllocator::stats() const {
  const Impl& s = *impl();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

}  // namespace lockstep
