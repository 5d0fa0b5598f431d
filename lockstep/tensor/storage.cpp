#include "lockstep/tensor/storage.h"

#include "lockstep/tensor/allocator.h"

namespace lockstep {

Storage::Storage(size_t nbytes) : nbytes_(nbytes) { data_ = CachingAllocator::instance().allocate(nbytes); }

Storage::Storage(void* data, size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), owned_(false), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (owned_) {
    CachingAllocator::instance().release(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace lockstep
