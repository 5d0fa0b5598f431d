#include "lockstep/tensor/cuda/allocator.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "lockstep/util/env.h"

namespace lockstep::cuda {

namespace {

constexpr size_t kSmall = size_t(1) << 20;       // below: 512-byte classes
constexpr size_t kLargeRound = size_t(2) << 20;  // at and above: 2 MiB classes

// LOCKSTEP_CUDA_EXACT_SIZES=1 (for compute-sanitizer, as PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING):
// each block is exactly the bytes asked for and is reused only for a request of that size, so
// memcheck sees an access past a tensor's end that the size classes would hide. Read once.
bool exactSizes() {
  static const bool exact = env::getBool("LOCKSTEP_CUDA_EXACT_SIZES", false);
  return exact;
}

size_t roundSize(size_t n) {
  if (n == 0) n = 1;
  if (exactSizes()) return n;
  if (n < kSmall) return (n + 511) / 512 * 512;
  return (n + kLargeRound - 1) / kLargeRound * kLargeRound;
}

struct Block {
  void* ptr = nullptr;
  size_t size = 0;
  cudaStream_t stream = nullptr;
  int pool = 0;                       // 0: the general cache; > 0: a CUDA graph's private pool
  std::vector<Stream> other_streams;  // recordStream
  std::vector<cudaEvent_t> pending;   // events on other_streams since release
};

std::string mib(size_t b) { return detail::concat(b >> 20, " MiB"); }

constexpr const char* kLimitVariable = "LOCKSTEP_CUDA_MEMORY_LIMIT";

// LOCKSTEP_CUDA_MEMORY_LIMIT: the most bytes each device's allocator may hold from cudaMalloc (0:
// no limit), read once.
size_t memoryLimit() {
  static const size_t limit = static_cast<size_t>(env::getBytes(kLimitVariable).value_or(0));
  return limit;
}

}  // namespace

struct CudaCachingAllocator::Impl {
  int device = 0;
  mutable std::mutex mu;
  std::unordered_map<void*, std::unique_ptr<Block>> live;  // handed out
  // Free blocks by (pool, stream, size class).
  std::map<std::tuple<int, cudaStream_t, size_t>, std::vector<std::unique_ptr<Block>>> free;
  std::set<int> released_pools;
  int active_pool = 0;       // beginPool .. endPool
  bool pool_paused = false;  // pausePool .. resumePool
  cudaStream_t pool_stream = nullptr;
  std::vector<std::unique_ptr<Block>> pending;  // released, awaiting events
  MemoryStats stats;

  void bumpAllocated(size_t n) {
    stats.allocated_current += n;
    stats.allocated_peak = std::max(stats.allocated_peak, stats.allocated_current);
  }

  void toFree(std::unique_ptr<Block> b) {
    b->other_streams.clear();
    if (b->pool != 0 && released_pools.count(b->pool)) b->pool = 0;
    auto key = std::make_tuple(b->pool, b->stream, b->size);
    free[key].push_back(std::move(b));
  }

  void processPending(bool wait) {
    for (auto it = pending.begin(); it != pending.end();) {
      Block& b = **it;
      bool done = true;
      for (cudaEvent_t e : b.pending) {
        cudaError_t err = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
        if (err == cudaErrorNotReady) {
          cudaGetLastError();
          done = false;
          break;
        }
        LOCKSTEP_CUDA_CHECK(err);
      }
      if (!done) {
        ++it;
        continue;
      }
      for (cudaEvent_t e : b.pending) cudaEventDestroy(e);
      b.pending.clear();
      toFree(std::move(*it));
      it = pending.erase(it);
    }
  }

  // The cached blocks back to the driver, but never a live graph's pool: its captured nodes write
  // those blocks at every replay (they go back with the graph, releasePool); and nothing while a
  // graph is captured (the pending blocks' events may be the capture's, cudaFree would sync).
  void freeCached() {
    if (active_pool != 0) return;
    processPending(true);
    for (auto it = free.begin(); it != free.end();) {
      if (std::get<0>(it->first) != 0) {
        ++it;
        continue;
      }
      for (auto& b : it->second) {
        LOCKSTEP_CUDA_CHECK(cudaFree(b->ptr));
        stats.reserved_current -= b->size;
      }
      it = free.erase(it);
    }
  }
};

CudaCachingAllocator& CudaCachingAllocator::forDevice(int device) {
  static std::array<std::once_flag, 64> once;
  static std::array<CudaCachingAllocator*, 64> all{};
  LOCKSTEP_ENFORCE(device >= 0 && device < 64, ValueError, "cuda:", device,
                   " is past the 64 devices lockstep supports");
  // Never destroyed: tensors held by static objects may be freed after main returns.
  std::call_once(once[device], [&] { all[device] = new CudaCachingAllocator(device); });
  return *all[device];
}

CudaCachingAllocator::CudaCachingAllocator(int device) : device_(device), impl_(new Impl) {
  impl_->device = device;
}
CudaCachingAllocator::~CudaCachingAllocator() { delete impl_; }

void* CudaCachingAllocator::allocate(size_t nbytes, const Stream& stream) {
  const size_t size = roundSize(nbytes);
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& m = *impl_;
  ++m.stats.allocations;
  if (!m.pending.empty()) m.processPending(false);
  const int pool =
      m.active_pool != 0 && !m.pool_paused && stream.handle() == m.pool_stream ? m.active_pool : 0;
  auto it = m.free.find({pool, stream.handle(), size});
  if (it != m.free.end() && !it->second.empty()) {
    std::unique_ptr<Block> b = std::move(it->second.back());
    it->second.pop_back();
    void* p = b->ptr;
    m.live.emplace(p, std::move(b));
    m.bumpAllocated(size);
    return p;
  }
  DeviceGuard guard(device_);
  void* p = nullptr;
  // A memory cap set on purpose (a smaller GPU's, or a model larger than the memory it may use):
  // past it the cache is emptied, then the request fails as on a full GPU.
  if (const size_t limit = memoryLimit(); limit != 0 && m.stats.reserved_current + size > limit) {
    m.freeCached();
    ++m.stats.alloc_retries;
    if (m.stats.reserved_current + size > limit) {
      ++m.stats.ooms;
      throw OutOfMemoryError(detail::concat("CUDA out of memory: tried to allocate ", mib(size),
                                            " on cuda:", device_, " past ", kLimitVariable, "=",
                                            *env::get(kLimitVariable), " (", mib(limit), "; lockstep holds ",
                                            mib(m.stats.allocated_current), " in tensors and ",
                                            mib(m.stats.reserved_current - m.stats.allocated_current),
                                            " cached). Raise or unset ", kLimitVariable,
                                            ", lower the batch size, use bf16 or ZeRO (stage 3 "
                                            "with offload_param keeps only the layers in use on the GPU)."));
    }
  }
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    m.freeCached();
    ++m.stats.alloc_retries;
    err = cudaMalloc(&p, size);
  }
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    ++m.stats.ooms;
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw OutOfMemoryError(detail::concat(
        "CUDA out of memory: tried to allocate ", mib(size), " on cuda:", device_, " (", mib(total_b),
        " total, ", mib(free_b), " free; lockstep holds ", mib(m.stats.allocated_current), " in tensors and ",
        mib(m.stats.reserved_current - m.stats.allocated_current),
        " cached). Lower the batch size, use bf16 or ZeRO, or free tensors you keep."));
  }
  LOCKSTEP_CUDA_CHECK(err);
  ++m.stats.cuda_mallocs;
  m.stats.reserved_current += size;
  m.stats.reserved_peak = std::max(m.stats.reserved_peak, m.stats.reserved_current);
  auto b = std::make_unique<Block>();
  b->ptr = p;
  b->size = size;
  b->stream = stream.handle();
  b->pool = pool;
  m.live.emplace(p, std::move(b));
  m.bumpAllocated(size);
  return p;
}

void CudaCachingAllocator::release(void* ptr) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& m = *impl_;
  auto it = m.live.find(ptr);
  LOCKSTEP_CHECK(it != m.live.end(), "release of a pointer this allocator did not hand out", ptr);
  std::unique_ptr<Block> b = std::move(it->second);
  m.live.erase(it);
  m.stats.allocated_current -= b->size;
  if (b->other_streams.empty()) {
    m.toFree(std::move(b));
    return;
  }
  DeviceGuard guard(device_);
  for (const Stream& s : b->other_streams) {
    cudaEvent_t e = nullptr;
    LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    LOCKSTEP_CUDA_CHECK(cudaEventRecord(e, s.handle()));
    b->pending.push_back(e);
  }
  m.pending.push_back(std::move(b));
}

void CudaCachingAllocator::recordStream(void* ptr, const Stream& s) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->live.find(ptr);
  LOCKSTEP_CHECK(it != impl_->live.end(), "recordStream of a pointer this allocator did not hand out", ptr);
  Block& b = *it->second;
  if (s.handle() == b.stream) return;
  if (std::find(b.other_streams.begin(), b.other_streams.end(), s) == b.other_streams.end()) {
    b.other_streams.push_back(s);
  }
}

void CudaCachingAllocator::emptyCache() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  DeviceGuard guard(device_);
  impl_->freeCached();
}

MemoryStats CudaCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

void CudaCachingAllocator::resetPeakStats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stats.allocated_peak = impl_->stats.allocated_current;
  impl_->stats.reserved_peak = impl_->stats.reserved_current;
}

void CudaCachingAllocator::beginPool(int pool, const Stream& stream) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  LOCKSTEP_CHECK(pool > 0 && impl_->active_pool == 0, "one pool at a time", pool, impl_->active_pool);
  impl_->active_pool = pool;
  impl_->pool_stream = stream.handle();
  impl_->released_pools.erase(pool);
}

void CudaCachingAllocator::endPool() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->active_pool = 0;
  impl_->pool_paused = false;
  impl_->pool_stream = nullptr;
}

void CudaCachingAllocator::pausePool() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pool_paused = true;
}

void CudaCachingAllocator::resumePool() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pool_paused = false;
}

void CudaCachingAllocator::releasePool(int pool) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& m = *impl_;
  m.released_pools.insert(pool);
  for (auto it = m.free.begin(); it != m.free.end();) {
    if (std::get<0>(it->first) != pool) {
      ++it;
      continue;
    }
    auto blocks = std::move(it->second);
    it = m.free.erase(it);
    for (auto& b : blocks) m.toFree(std::move(b));
  }
}

void* allocatePinned(size_t nbytes) {
  void* p = nullptr;
  LOCKSTEP_CUDA_CHECK(cudaHostAlloc(&p, nbytes == 0 ? 1 : nbytes, cudaHostAllocDefault));
  return p;
}

void freePinned(void* p) {
  if (p) cudaFreeHost(p);
}

}  // namespace lockstep::cuda
