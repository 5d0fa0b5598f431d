#include "lockstep/data/cuda/device_feeder.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "lockstep/tensor/cuda/allocator.h"

namespace lockstep::data {

PinnedBufferPool::~PinnedBufferPool() {
  for (const Buffer& b : free_) cuda::freePinned(b.data);
}

PinnedBufferPool::Buffer PinnedBufferPool::take(size_t nbytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Batches come in one or two sizes (the last one may be short): the first that fits will do.
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].nbytes >= nbytes) {
        Buffer b = free_[i];
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        return b;
      }
    }
    ++made_;
  }
  return {cuda::allocatePinned(nbytes), nbytes};
}

void PinnedBufferPool::give(Buffer b) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(b);
}

size_t PinnedBufferPool::buffersMade() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

Tensor PinnedBufferPool::pinnedCopy(const Tensor& t) {
  LOCKSTEP_ENFORCE(t.device().isCpu(), ValueError, "pinnedCopy: ", t.describe(), " is not on the host");
  // A dense tensor is copied as its bytes lie (an NHWC batch stays NHWC): the buffer is viewed with
  // t's dimensions ordered by stride, outermost first, then permuted back to t's order.
  const Tensor src = t.isDense() ? t : t.contiguous();
  const Buffer b = take(src.nbytes());
  std::shared_ptr<PinnedBufferPool> self = shared_from_this();
  std::vector<int64_t> order(static_cast<size_t>(src.dim()));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t c) { return src.stride(a) > src.stride(c); });
  Shape blob_shape, back(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    blob_shape.push_back(src.size(order[k]));
    back[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
  }
  Tensor blob = Tensor::fromBlob(b.data, blob_shape, src.dtype(), [self, b](void*) { self->give(b); });
  if (src.nbytes() != 0) std::memcpy(b.data, src.dataPtr(), src.nbytes());
  return blob.permute(back);
}

DeviceFeeder::DeviceFeeder(Device device)
    : device_(device),
      side_(cuda::streamFromPool(device.index)),
      pool_(std::make_shared<PinnedBufferPool>()) {
  LOCKSTEP_ENFORCE(device.isCuda(), ValueError, "DeviceFeeder: ", deviceName(device), " is not a GPU");
}

DeviceFeeder::~DeviceFeeder() {
  // Host buffers must outlive the copies reading them.
  if (ahead_) ahead_->copied.synchronize();
  if (previous_) previous_->copied.synchronize();
}

Batch DeviceFeeder::pin(const Batch& b) const {
  Batch out;
  out.input = pool_->pinnedCopy(b.input);
  out.target = pool_->pinnedCopy(b.target);
  out.indices = b.indices;
  return out;
}

Tensor DeviceFeeder::toDevice(const Tensor& host) {
  // Allocated on the compute stream, which frees it after the step; the side stream's write is
  // recorded so that the block is not handed out again before the copy is done.
  // host is dense (pinnedCopy): the device copy takes its strides and its bytes as they are.
  Tensor dev = Tensor::emptyStrided(host.shape(), host.strides(), host.dtype(), device_);
  if (host.nbytes() == 0) return dev;
  cuda::CudaCachingAllocator::forDevice(device_.index).recordStream(dev.storage()->data(), side_);
  LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(dev.devicePtr(), host.dataPtr(), host.nbytes(), cudaMemcpyHostToDevice,
                                      side_.handle()));
  return dev;
}

void DeviceFeeder::stage(Batch host) {
  LOCKSTEP_CHECK(!ahead_, "DeviceFeeder::stage: the staged batch was not taken");
  cuda::DeviceGuard guard(device_.index);
  const cuda::Stream compute = cuda::currentStream(device_.index);
  // The new tensors may reuse blocks the compute stream's queued work still reads: the side
  // stream starts after that work.
  cuda::Event compute_ready;
  compute_ready.record(compute);
  compute_ready.block(side_);
  InFlight f{std::move(host), {}, cuda::Event()};
  f.device.input = toDevice(f.host.input);
  f.device.target = toDevice(f.host.target);
  f.device.indices = f.host.indices;
  f.copied.record(side_);
  ahead_ = std::move(f);
}

void DeviceFeeder::clear() {
  if (ahead_) ahead_->copied.synchronize();
  ahead_.reset();
}

Batch DeviceFeeder::take() {
  LOCKSTEP_CHECK(ahead_.has_value(), "DeviceFeeder::take: nothing staged");
  cuda::DeviceGuard guard(device_.index);
  ahead_->copied.block(cuda::currentStream(device_.index));
  if (previous_) previous_->copied.synchronize();  // long done: the compute stream already used it
  previous_ = std::move(ahead_);
  ahead_.reset();
  return std::move(previous_->device);
}

}  // namespace lockstep::data
