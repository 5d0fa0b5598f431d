#pragma once
// A whole training step (forward, loss, backward, optimizer update) captured once as a CUDA graph
// and replayed, so that a small model's step costs one launch instead of hundreds (issue 20 item 4;
// torch.compile(mode="reduce-overhead") does the same for PyTorch). The engine's step runs eagerly
// for the first warmup steps (cuDNN and cuBLASLt choose their algorithms, the optimizer makes its
// state, the caching allocator fills), then once under capture, then as replays: each batch is
// copied into the captured input tensors and the graph relaunched.
//
// Only a step whose GPU work and host decisions are the same every time can be replayed; what
// would differ is listed by stepGraphBlocker, and StepGraph refuses such an engine. A batch of
// another shape (an epoch's last, smaller one) runs eagerly.
//
// Not thread-safe; the engine must not be stepped by anything else meanwhile.
#include <functional>
#include <memory>
#include <string>

#include "lockstep/parallel/engine.h"

namespace lockstep::cuda {
class Graph;
}

namespace lockstep::parallel {

/// Why engine's step cannot be replayed as a CUDA graph, in words ("" when it can): the model is
/// not on a GPU; this build has no CUDA; several ranks (the collectives are not captured yet);
/// ZeRO; a loss scaler (its skip decision is made on the host); gradient clipping (the norm is read
/// on the host); gradient accumulation; an LR schedule (the rate is a host value baked into the
/// graph); an optimizer other than SGD (Adam's bias correction uses the host's step count);
/// dropout (its masks are drawn from the host's generator offsets); a language model.
std::string stepGraphBlocker(const Engine& engine);

class StepGraph {
 public:
  /// The loss of one step from the model's output and the target (the caller's criterion).
  using LossFn = std::function<autograd::Variable(const autograd::Variable& output, const Tensor& target)>;

  /// ValueError naming stepGraphBlocker's reason when the engine's step cannot be replayed.
  StepGraph(Engine& engine, LossFn loss, int warmup_steps = 3);
  ~StepGraph();

  /// One optimizer step on (input, target), both on the model's GPU. Returns the step's loss (a
  /// GPU tensor, valid until the next call).
  Tensor step(const Tensor& input, const Tensor& target);
  /// Steps that ran as replays so far.
  int64_t replays() const { return replays_; }

 private:
  Tensor eager(const Tensor& input, const Tensor& target);

  Engine& engine_;
  LossFn loss_;
  int warmup_;
  int64_t eager_steps_ = 0, replays_ = 0;
  std::unique_ptr<cuda::Graph> graph_;
  Tensor static_input_, static_target_, static_loss_;
};

}  // namespace lockstep::parallel
