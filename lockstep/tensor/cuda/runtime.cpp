#include "lockstep/tensor/cuda/runtime.h"

#include <array>
#include <atomic>
#include <mutex>
#include <vector>

namespace lockstep::cuda {

namespace {
// Errors a kernel raises while it runs (the device faulted): reported by whichever later call
// noticed them, and they leave the process's CUDA context unusable.
bool isKernelFault(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}
}  // namespace

void throwCudaError(cudaError_t err, const char* what, const char* file, int line) {
  cudaGetLastError();  // clear a sticky launch error so the next call reports its own
  int device = -1;
  const bool known = cudaGetDevice(&device) == cudaSuccess;
  std::string msg =
      detail::concat("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") on ",
                     known ? detail::concat("cuda:", device) : std::string("the current GPU"), " in ", what,
                     " at ", file, ":", line);
  if (isKernelFault(err)) {
    msg += detail::concat(
        ": a GPU kernel faulted. Kernels run asynchronously, so the call named here is where the fault "
        "was noticed, not necessarily the op that caused it; run again with CUDA_LAUNCH_BLOCKING=1 to "
        "have it reported at the kernel's own launch (with its op). The process's CUDA context is unusable "
        "now: the process must restart (lockstep run --max-restarts resumes from the last checkpoint)");
  }
  if (err == cudaErrorMemoryAllocation) throw Error(msg + "; the GPU is out of memory");
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || err == cudaErrorInvalidDevice) {
    throw NotSupportedError(msg);
  }
  throw Error(msg);
}

int deviceCount() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

void checkDevice(int index) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw NotSupportedError(detail::concat("device cuda:", index,
                                           " is not available: ", cudaGetErrorString(err),
                                           " (no GPU or no NVIDIA driver here; use device 'cpu')"));
  }
  LOCKSTEP_ENFORCE(index >= 0 && index < n, NotSupportedError, "device cuda:", index,
                   " is not available: this machine has ", n, " GPU", n == 1 ? "" : "s",
                   " (cuda:0 .. cuda:", n - 1, "; under lockstep run each rank takes cuda:LOCAL_RANK)");
}

std::string describeDevice(int index) {
  cudaDeviceProp prop{};
  LOCKSTEP_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return detail::concat(prop.name, ", sm_", prop.major, prop.minor, ", ", prop.totalGlobalMem >> 20,
                        " MiB, driver CUDA ", driver / 1000, ".", (driver % 1000) / 10, ", runtime ",
                        runtime / 1000, ".", (runtime % 1000) / 10);
}

int currentDevice() {
  int d = 0;
  LOCKSTEP_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void setCurrentDevice(int index) { LOCKSTEP_CUDA_CHECK(cudaSetDevice(index)); }

void Stream::synchronize() const {
  DeviceGuard guard(device_);
  LOCKSTEP_CUDA_CHECK(cudaStreamSynchronize(handle_));
}

namespace {
constexpr int kMaxDevices = 64;
constexpr int kPoolSize = 4;

struct DeviceStreams {
  std::once_flag once;
  cudaStream_t default_stream = nullptr;
  std::array<cudaStream_t, kPoolSize> pool{};
  std::array<cudaStream_t, kPoolSize> high_pool{};
  std::atomic<unsigned> next{0}, next_high{0};
};

DeviceStreams& streamsOf(int device) {
  LOCKSTEP_ENFORCE(device >= 0 && device < kMaxDevices, ValueError, "cuda:", device, " is past the ",
                   kMaxDevices, " devices lockstep supports");
  static std::array<DeviceStreams, kMaxDevices> all;
  DeviceStreams& s = all[device];
  std::call_once(s.once, [&] {
    checkDevice(device);
    DeviceGuard guard(device);
    int least = 0, greatest = 0;
    LOCKSTEP_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithFlags(&s.default_stream, cudaStreamNonBlocking));
    for (int i = 0; i < kPoolSize; ++i) {
      LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithPriority(&s.pool[i], cudaStreamNonBlocking, least));
      LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithPriority(&s.high_pool[i], cudaStreamNonBlocking, greatest));
    }
  });
  return s;
}

// The current stream per device, per thread; a null handle means the device's default.
thread_local std::array<cudaStream_t, kMaxDevices> tls_current{};
}  // namespace

Stream defaultStream(int device) { return Stream(device, streamsOf(device).default_stream); }

Stream streamFromPool(int device, bool high_priority) {
  DeviceStreams& s = streamsOf(device);
  if (high_priority) return Stream(device, s.high_pool[s.next_high++ % kPoolSize]);
  return Stream(device, s.pool[s.next++ % kPoolSize]);
}

Stream currentStream(int device) {
  DeviceStreams& s = streamsOf(device);
  cudaStream_t h = tls_current[device];
  return Stream(device, h ? h : s.default_stream);
}

DeviceGuard::DeviceGuard(int device) : previous_(currentDevice()) {
  if (device != previous_) setCurrentDevice(device);
}

DeviceGuard::~DeviceGuard() {
  int now = 0;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

StreamGuard::StreamGuard(const Stream& s) : previous_(currentStream(s.device())), device_(s.device()) {
  tls_current[s.device()] = s.handle();
}

StreamGuard::~StreamGuard() { tls_current[previous_.device()] = previous_.handle(); }

Event::Event(bool timing) {
  device_ = currentDevice();
  LOCKSTEP_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

Event::Event(Event&& o) noexcept : event_(o.event_), device_(o.device_) { o.event_ = nullptr; }

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_) cudaEventDestroy(event_);
    event_ = o.event_;
    device_ = o.device_;
    o.event_ = nullptr;
  }
  return *this;
}

void Event::record(const Stream& s) {
  DeviceGuard guard(s.device());
  LOCKSTEP_CUDA_CHECK(cudaEventRecord(event_, s.handle()));
}

void Event::block(const Stream& s) const {
  DeviceGuard guard(s.device());
  LOCKSTEP_CUDA_CHECK(cudaStreamWaitEvent(s.handle(), event_, 0));
}

bool Event::query() const {
  cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  LOCKSTEP_CUDA_CHECK(err);
  return true;
}

void Event::synchronize() const { LOCKSTEP_CUDA_CHECK(cudaEventSynchronize(event_)); }

float Event::elapsedMs(const Event& end) const {
  float ms = 0;
  LOCKSTEP_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace lockstep::cuda
