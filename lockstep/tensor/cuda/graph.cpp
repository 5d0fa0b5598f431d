#include "lockstep/tensor/cuda/graph.h"

#include <atomic>

#include "lockstep/tensor/cuda/allocator.h"

namespace lockstep::cuda {

namespace {
std::atomic<int> next_pool{1};
}  // namespace

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if (pool_) CudaCachingAllocator::forDevice(device_).releasePool(pool_);
}

void Graph::capture(int device, const std::function<void()>& fn) {
  LOCKSTEP_ENFORCE(!captured(), ValueError, "cuda::Graph::capture: this graph already holds a capture");
  device_ = device;
  DeviceGuard guard(device);
  stream_ = currentStream(device);
  LOCKSTEP_ENFORCE(stream_.handle() != nullptr, ValueError,
                   "cuda::Graph::capture: the legacy default stream cannot be captured");
  pool_ = next_pool++;
  CudaCachingAllocator& alloc = CudaCachingAllocator::forDevice(device);
  // Work queued before the capture must not be folded into it.
  stream_.synchronize();
  // The capture's pool cannot take the cached blocks of the eager steps before it, and nothing is
  // given back to the driver while it captures: give the cache back first, so that a step using
  // most of the GPU's memory can be captured.
  alloc.emptyCache();
  alloc.beginPool(pool_, stream_);
  // Relaxed: the allocator may still cudaMalloc (outside the graph) for the pool while capturing.
  if (cudaError_t err = cudaStreamBeginCapture(stream_.handle(), cudaStreamCaptureModeRelaxed);
      err != cudaSuccess) {
    cudaGetLastError();
    alloc.endPool();  // the allocator serves the stream from its general cache again
    LOCKSTEP_CUDA_CHECK(err);
  }
  try {
    fn();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(stream_.handle(), &broken);
    if (broken) cudaGraphDestroy(broken);
    cudaGetLastError();
    alloc.endPool();
    throw;
  }
  cudaError_t err = cudaStreamEndCapture(stream_.handle(), &graph_);
  alloc.endPool();
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw Error(detail::concat("CUDA graph capture failed: ", cudaGetErrorString(err),
                               " (the captured step read a GPU value on the host, synchronised, or used "
                               "another stream without joining it back; run it eagerly)"));
  }
  LOCKSTEP_CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &nodes_));
  LOCKSTEP_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  // Upload once so that the first replay is not slower than the rest.
  LOCKSTEP_CUDA_CHECK(cudaGraphUpload(exec_, stream_.handle()));
}

void Graph::replay() {
  LOCKSTEP_ENFORCE(captured(), ValueError, "cuda::Graph::replay: nothing was captured");
  DeviceGuard guard(device_);
  LOCKSTEP_CUDA_CHECK(cudaGraphLaunch(exec_, stream_.handle()));
}

}  // namespace lockstep::cuda
