#pragma once
// A CUDA graph: the GPU work a function queues on the current stream, recorded once and then
// replayed with a single launch (torch.cuda.CUDAGraph). A training step of a small model is
// hundreds of kernel launches of a few microseconds each; replayed as a graph it costs one launch.
//
// What capture needs of the captured function (as in PyTorch): it reads no GPU value on the host
// (no item(), no copy to pageable host memory, no synchronize), its shapes and host-side decisions
// are the same every time (they are baked into the graph), and its inputs are read from tensors
// that stay allocated, which the caller refills before each replay. Memory allocated while
// capturing comes from the graph's private pool (CudaCachingAllocator::beginPool), so tensors the
// function leaves behind (its outputs) keep their addresses and every replay writes them again.
//
// Not thread-safe; capture and replay on one thread, on the device's current stream.
#include <functional>

#include "lockstep/tensor/cuda/runtime.h"

namespace lockstep::cuda {

class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Runs fn once under stream capture on device's current stream and instantiates what it queued.
  /// The GPU work is recorded, not run: replay() runs it. Throws (and leaves no graph) when fn
  /// does something capture forbids, naming CUDA's reason.
  void capture(int device, const std::function<void()>& fn);
  /// Launches the recorded work on the stream it was captured on. Asynchronous.
  void replay();
  bool captured() const { return exec_ != nullptr; }
  /// Kernel and copy nodes recorded.
  size_t numNodes() const { return nodes_; }

 private:
  int device_ = 0;
  int pool_ = 0;
  Stream stream_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
};

}  // namespace lockstep::cuda
