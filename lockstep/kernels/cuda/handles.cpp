#include "lockstep/kernels/cuda/handles.h"

#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "lockstep/kernels/cuda/cublaslt.h"

namespace lockstep::kernels::cuda {

namespace {
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;  // what PyTorch gives cuBLASLt on Hopper

std::mutex& handlesMutex() {
  static std::mutex m;
  return m;
}
}  // namespace

cublasLtHandle_t blasLtHandle(int device) {
  // Never destroyed: the process's CUDA context may be gone by the time static destructors run.
  static auto* handles = new std::unordered_map<int, cublasLtHandle_t>();
  std::lock_guard<std::mutex> lock(handlesMutex());
  auto it = handles->find(device);
  if (it != handles->end()) return it->second;
  ::lockstep::cuda::DeviceGuard guard(device);
  cublasLtHandle_t h = nullptr;
  LOCKSTEP_CUBLAS_CHECK(cublasLt().cublasLtCreate(&h),
                        "creating the cuBLASLt handle of cuda:" + std::to_string(device));
  handles->emplace(device, h);
  return h;
}

Workspace blasWorkspace(const ::lockstep::cuda::Stream& s) {
  static auto* spaces = new std::map<std::pair<int, cudaStream_t>, Tensor>();
  std::lock_guard<std::mutex> lock(handlesMutex());
  auto key = std::make_pair(s.device(), s.handle());
  auto it = spaces->find(key);
  if (it == spaces->end()) {
    ::lockstep::cuda::StreamGuard guard(s);  // the block belongs to the stream that uses it
    Tensor t = Tensor::empty({static_cast<int64_t>(kBlasWorkspaceBytes)}, DType::u8, MemoryFormat::contiguous,
                             Device::cuda(s.device()));
    it = spaces->emplace(key, std::move(t)).first;
  }
  return {it->second.devicePtr(), kBlasWorkspaceBytes};
}

cudnnHandle_t dnnHandle(const ::lockstep::cuda::Stream& s) {
  thread_local std::unordered_map<int, cudnnHandle_t> handles;  // kept for the thread's life
  cudnnHandle_t h = nullptr;
  auto it = handles.find(s.device());
  if (it != handles.end()) {
    h = it->second;
  } else {
    ::lockstep::cuda::DeviceGuard guard(s.device());
    LOCKSTEP_CUDNN_CHECK(cudnnCreate(&h), "creating the cuDNN handle of cuda:" + std::to_string(s.device()));
    handles.emplace(s.device(), h);
  }
  LOCKSTEP_CUDNN_CHECK(cudnnSetStream(h, s.handle()), std::string("setting cuDNN's stream"));
  return h;
}

Tensor scratch(size_t bytes, const Device& device) {
  return Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, MemoryFormat::contiguous, device);
}

void throwBlasError(cublasStatus_t status, const std::string& what) {
  std::string msg = detail::concat("cuBLASLt error ", cublasLt().cublasLtGetStatusName(status), " (",
                                   cublasLt().cublasLtGetStatusString(status), "): ", what);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) throw NotSupportedError(msg);
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw Error(msg + "; the GPU is out of memory");
  throw Error(msg);
}

void throwDnnError(cudnnStatus_t status, const std::string& what) {
  std::string msg = detail::concat("cuDNN error ", cudnnGetErrorString(status), ": ", what);
  if (status / 1000 == CUDNN_STATUS_NOT_SUPPORTED / 1000)
    throw NotSupportedError(msg);  // 3xxx: not supported
  if (status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    throw Error(msg + "; the GPU is out of memory");
  throw Error(msg);
}

void checkSameDevice(const char* op, const Tensor& first, const Tensor& second, const Tensor& third,
                     const Tensor& fourth) {
  for (const Tensor* t : {&second, &third, &fourth}) {
    LOCKSTEP_ENFORCE(!t->defined() || t->device() == first.device(), ValueError, op,
                     ": operands on different ", "devices, ", first.describe(), " and ", t->describe(),
                     "; move them to one device with .to()");
  }
}

}  // namespace lockstep::kernels::cuda
