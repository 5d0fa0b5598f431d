#include "lockstep/tensor/storage.h"

#include "lockstep/tensor/allocator.h"
#include "lockstep/util/error.h"

namespace lockstep {

Storage::Storage(size_t nbytes) : nbytes_(nbytes) { data_ = CachingAllocator::instance().allocate(nbytes); }

Storage::Storage(void* data, size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), owned_(false), deleter_(std::move(deleter)) {}

void Storage::release() {
  LOCKSTEP_ENFORCE(owned_, ValueError, "Storage::release: borrowed memory is not the storage's to free");
  if (released_) return;
  CachingAllocator::instance().release(data_, nbytes_);
  data_ = nullptr;
  released_ = true;
}

void Storage::materialize() {
  if (!released_) return;
  data_ = CachingAllocator::instance().allocate(nbytes_);
  released_ = false;
}

Storage::~Storage() {
  if (released_) return;
  if (owned_) {
    CachingAllocator::instance().release(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace lockstep
