#include "lockstep/tensor/storage.h"

#include "lockstep/tensor/allocator.h"
#include "lockstep/tensor/deferred_init.h"
#include "lockstep/util/error.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/allocator.h"
#endif

namespace lockstep {

namespace {
void* allocateOn(const Device& d, size_t nbytes) {
  if (d.isCpu()) return CachingAllocator::instance().allocate(nbytes);
  checkDeviceAvailable(d);
#if LOCKSTEP_WITH_CUDA
  return cuda::CudaCachingAllocator::forDevice(d.index).allocate(nbytes, cuda::currentStream(d.index));
#else
  return nullptr;  // unreachable: checkDeviceAvailable threw
#endif
}

void releaseOn(const Device& d, void* p, size_t nbytes) {
  if (d.isCpu()) {
    CachingAllocator::instance().release(p, nbytes);
    return;
  }
#if LOCKSTEP_WITH_CUDA
  cuda::CudaCachingAllocator::forDevice(d.index).release(p);
#endif
}
}  // namespace

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (nbytes > 0 && DeferredInit::active()) {
    released_ = deferred_ = true;
    return;
  }
  data_ = allocateOn(device_, nbytes);
}

Storage::Storage(void* data, size_t nbytes, std::function<void(void*)> deleter, Device device)
    : data_(data), nbytes_(nbytes), owned_(false), deleter_(std::move(deleter)), device_(device) {}

std::shared_ptr<Storage> Storage::pinnedHost(size_t nbytes) {
#if LOCKSTEP_WITH_CUDA
  auto s =
      std::make_shared<Storage>(cuda::allocatePinned(nbytes), nbytes, [](void* p) { cuda::freePinned(p); });
  s->pinned_ = true;
  return s;
#else
  throw NotSupportedError(
      "pinned host memory needs CUDA: this lockstep was built without it (LOCKSTEP_CUDA)");
#endif
}

void Storage::release() {
  LOCKSTEP_ENFORCE(owned_, ValueError, "Storage::release: borrowed memory is not the storage's to free");
  if (released_) return;
  releaseOn(device_, data_, nbytes_);
  data_ = nullptr;
  released_ = true;
}

void Storage::materialize() {
  if (!released_) return;
  data_ = allocateOn(device_, nbytes_);
  released_ = false;
  if (!deferred_) return;
  deferred_ = false;
  std::vector<std::function<void(void*)>> writes;
  writes.swap(deferred_writes_);
  for (const auto& write : writes) write(data_);
}

void Storage::deferWrite(std::function<void(void* data)> write) {
  LOCKSTEP_CHECK(deferred_, "deferWrite on a storage that is not deferred");
  deferred_writes_.push_back(std::move(write));
}

Storage::~Storage() {
  if (released_) return;
  if (owned_) {
    releaseOn(device_, data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace lockstep
