#include "lockstep/parallel/tensor_comm.h"

#include <cstring>
#include <map>
#include <mutex>

#include "lockstep/util/error.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/allocator.h"
#include "lockstep/tensor/cuda/runtime.h"
#endif

namespace lockstep::parallel {

namespace {
Tensor& checkDense(Tensor& t, const char* op) {
  LOCKSTEP_ENFORCE(t.defined() && t.isDense(), ValueError, op, " needs a dense tensor, got ", t.describe(),
                   " with strides ", shapeToString(t.strides()));
  return t;
}
}  // namespace

comm::BufferPlace placeOf(const Device& device) {
  comm::BufferPlace p;
#if LOCKSTEP_WITH_CUDA
  if (device.isCuda()) {
    p.device = device.index;
    p.stream = static_cast<void*>(cuda::currentStream(p.device).handle());
  }
#endif
  return p;
}

comm::BufferPlace placeOf(const Tensor& t) { return placeOf(t.device()); }

#if LOCKSTEP_WITH_CUDA
namespace {
cuda::Stream streamOf(const comm::BufferPlace& place) {
  return cuda::Stream(place.device, static_cast<cudaStream_t>(place.stream));
}

// waiter waits, on the GPU, for the work queued on `from` so far, through an event of this thread's for
// (a wait takes the event's state when it is queued, so one event serves every such wait).
void waitFor(const cuda::Stream& waiter, const cuda::Stream& from) {
  thread_local std::map<int, cuda::Event> events;
  cuda::DeviceGuard guard(from.device());
  auto it = events.find(from.device());
  if (it == events.end()) it = events.emplace(from.device(), cuda::Event()).first;
  it->second.record(from);
  it->second.block(waiter);
}
}  // namespace
#endif

comm::BufferPlace forkSidePlace(const comm::BufferPlace& place, SideLane lane) {
  if (!place.onDevice()) return place;
#if LOCKSTEP_WITH_CUDA
  static std::mutex mutex;
  static std::map<std::pair<int, SideLane>, cuda::Stream> sides;  // made once, for the process's life
  cuda::Stream side;
  {
    std::lock_guard lock(mutex);
    auto it = sides.find({place.device, lane});
    if (it == sides.end()) {
      cuda::DeviceGuard guard(place.device);
      cudaStream_t handle = nullptr;
      LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking));
      it = sides.emplace(std::pair{place.device, lane}, cuda::Stream(place.device, handle)).first;
    }
    side = it->second;
  }
  waitFor(side, streamOf(place));
  comm::BufferPlace p = place;
  p.stream = static_cast<void*>(side.handle());
  return p;
#else
  (void)lane;
  return place;
#endif
}

void joinSidePlace(const comm::BufferPlace& place, const comm::BufferPlace& side) {
  if (!place.onDevice() || !side.onDevice() || side.stream == place.stream) return;
#if LOCKSTEP_WITH_CUDA
  waitFor(streamOf(place), streamOf(side));
#endif
}

void recordSideUse(const Tensor& t, const comm::BufferPlace& side) {
  if (!t.defined() || !t.isCuda() || !side.onDevice() || t.nbytes() == 0) return;
#if LOCKSTEP_WITH_CUDA
  cuda::CudaCachingAllocator::forDevice(t.device().index).recordStream(t.storage()->data(), streamOf(side));
#endif
}

void CopyFence::record(const comm::BufferPlace& place) {
  pending_ = true;
  if (!place.onDevice()) return;
#if LOCKSTEP_WITH_CUDA
  cuda::DeviceGuard guard(place.device);
  if (!event_) event_ = std::make_shared<cuda::Event>();
  static_cast<cuda::Event*>(event_.get())
      ->record(cuda::Stream(place.device, static_cast<cudaStream_t>(place.stream)));
#endif
}

void CopyFence::wait() {
  if (!pending_) return;
  pending_ = false;
#if LOCKSTEP_WITH_CUDA
  if (event_) static_cast<cuda::Event*>(event_.get())->synchronize();
#endif
}

void waitForCopies(const comm::BufferPlace& place) {
  if (!place.onDevice()) return;
#if LOCKSTEP_WITH_CUDA
  cuda::DeviceGuard guard(place.device);
  LOCKSTEP_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(place.stream)));
#endif
}

void copyBytes(void* dst, const void* src, size_t bytes, const comm::BufferPlace& place) {
  if (bytes == 0) return;
  if (!place.onDevice()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if LOCKSTEP_WITH_CUDA
  cuda::DeviceGuard guard(place.device);
  LOCKSTEP_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(place.stream)));
#else
  LOCKSTEP_CHECK(false, "copyBytes: a device buffer in a build without CUDA");
#endif
}

std::shared_ptr<comm::Work> allreduce(comm::ProcessGroup& pg, Tensor& t, comm::ReduceOp op, bool defer) {
  checkDense(t, "allreduce");
  comm::AllreduceOptions o;
  o.op = op;
  o.defer = defer;
  o.place = placeOf(t);
  return pg.allreduce(t.numel() ? t.devicePtr() : nullptr, static_cast<size_t>(t.numel()), t.dtype(), o);
}

double allreduceScalar(comm::ProcessGroup& pg, double value, comm::ReduceOp op) {
  comm::AllreduceOptions o;
  o.op = op;
  o.defer = true;  // waited for at once
  pg.allreduce(&value, 1, DType::f64, o)->wait();
  return value;
}

void broadcast(comm::ProcessGroup& pg, Tensor& t, int root) {
  checkDense(t, "broadcast");
  comm::BroadcastOptions o;
  o.root = root;
  o.place = placeOf(t);
  pg.broadcast(t.numel() ? t.devicePtr() : nullptr, static_cast<size_t>(t.numel()), t.dtype(), o)->wait();
}

std::vector<std::string> allgatherBytes(comm::ProcessGroup& pg, const std::string& mine) {
  const int n = pg.size();
  int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(n);
  pg.allgather(&len, lens.data(), 1, DType::i64)->wait();
  std::vector<size_t> counts(lens.begin(), lens.end());
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::string all(total, '\0');
  pg.allgatherv(mine.data(), all.data(), counts, DType::u8)->wait();
  std::vector<std::string> out;
  size_t off = 0;
  for (size_t c : counts) {
    out.push_back(all.substr(off, c));
    off += c;
  }
  return out;
}

std::string broadcastBytes(comm::ProcessGroup& pg, const std::string& mine, int root) {
  int64_t len = static_cast<int64_t>(mine.size());
  comm::BroadcastOptions o;
  o.root = root;
  pg.broadcast(&len, 1, DType::i64, o)->wait();
  std::string out = pg.rank() == root ? mine : std::string(static_cast<size_t>(len), '\0');
  pg.broadcast(out.data(), out.size(), DType::u8, o)->wait();
  return out;
}

void rethrowIfAnyRankFailed(comm::ProcessGroup* pg, std::exception_ptr failed, const std::string& others) {
  double any = failed ? 1.0 : 0.0;
  if (pg && pg->size() > 1) any = allreduceScalar(*pg, any, comm::ReduceOp::max);
  if (failed) std::rethrow_exception(failed);
  LOCKSTEP_ENFORCE(any == 0.0, IoError, others);
}

}  // namespace lockstep::parallel
