#pragma once
// A whole training step (forward, loss, backward, clipping, optimizer update) captured once as a
// CUDA graph and replayed, so that a small model's step costs one launch instead of hundreds (issue
// 20 item 4; torch.compile(mode="reduce-overhead") does the same for PyTorch). The engine's step runs
// eagerly for the first warmup steps (cuDNN and cuBLASLt choose their algorithms, the optimizer
// makes its state, the caching allocator fills), then once under capture, then as replays: each
// batch is copied into the captured input tensors and the graph relaunched.
//
// A replay computes bit for bit what the eager step would have (issue 35 item 4). What changes from
// step to step reaches the graph's kernels through device memory that the host rewrites before each
// launch, by kernels queued on the same stream: the optimizer's scalars (the learning rate of an LR
// schedule, Adam's bias corrections from the step counts the host keeps: optim::Optimizer's
// capture) and the dropout generators' Philox states (kernels::PhiloxCapture). The host side of a
// replayed step runs as it would eagerly: step counts and generator offsets advance, the schedule
// steps, the engine counts the step. What the host would decide differently from step to step (a
// loss scaler's skip, collectives, accumulation windows) is listed by stepGraphBlocker, and
// StepGraph refuses such an engine. The shape captured is the first to have run warmup steps
// eagerly (each shape counts its own, so an epoch's last, smaller batch is not what gets captured);
// a batch of another shape runs eagerly, and the replays after it go on from where it left the
// state.
//
// Replays run on the stream that was current at capture: keep it current. Not thread-safe; the
// engine must not be stepped by anything else meanwhile, and must outlive the StepGraph.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/parallel/engine.h"

namespace lockstep::cuda {
class Graph;
}
namespace lockstep::kernels {
class PhiloxCapture;
}

namespace lockstep::parallel {

/// What decides whether an engine's step can be replayed (stepGraphFacts reads it off an engine),
/// so that the rule is a pure function, tested without a GPU.
struct StepGraphFacts {
  bool model_on_gpu = false;
  bool built_with_cuda = false;
  bool several_ranks = false;
  bool zero = false;
  bool loss_scaler = false;
  int64_t gradient_accumulation_steps = 1;
  /// The optimizer's name ("SGD", "Adam", ...).
  std::string optimizer;
};

StepGraphFacts stepGraphFacts(const Engine& engine);

/// Why a step with these facts cannot be replayed as a CUDA graph, in words ("" when it can): the
/// model is not on a GPU; this build has no CUDA; several ranks (the collectives are not captured
/// yet); ZeRO; a loss scaler (it decides on the host whether a step is skipped); gradient
/// accumulation; an optimizer without a captured update (other than SGD, Adam, AdamW). LR
/// schedules, gradient clipping (the norm stays on the device), dropout (attention's too), Adam's
/// bias corrections and language models are replayed. Pure.
std::string stepGraphBlocker(const StepGraphFacts& facts);
/// stepGraphBlocker(stepGraphFacts(engine)).
std::string stepGraphBlocker(const Engine& engine);

/// What StepGraph does when CUDA refuses to capture the step (the step read a GPU value on the host,
/// synchronised, or used a stream it did not join back: CUDA's message says which).
enum class OnCaptureFailure {
  /// step() throws CUDA's error; the host's side of that step has run and its GPU work has not, so
  /// the run cannot go on (`cuda_graph: true`).
  raise,
  /// The host's side of the step is put back as it was before the capture (Engine::HostStepState,
  /// the dropout generators), and that step and every later one run eagerly, with the results the
  /// eager run has (`cuda_graph: auto`); eagerBecause() says why.
  run_eagerly,
};

class StepGraph {
 public:
  /// One step's loss: the engine's forward of input and the loss against target (the caller's
  /// criterion through Engine::forwardLoss, or a model's own loss through Engine::forwardWith).
  using LossFn = std::function<autograd::Variable(const Tensor& input, const Tensor& target)>;

  /// ValueError naming stepGraphBlocker's reason when the engine's step cannot be replayed.
  StepGraph(Engine& engine, LossFn loss, int warmup_steps = 3,
            OnCaptureFailure on_failure = OnCaptureFailure::raise);
  ~StepGraph();

  /// One optimizer step on (input, target), both on the model's GPU. Returns the step's loss (a
  /// GPU tensor, valid until the next call).
  Tensor step(const Tensor& input, const Tensor& target);
  /// Steps that ran as replays so far (the captured step's own launch included).
  int64_t replays() const { return replays_; }
  /// Whether the step has been captured.
  bool captured() const { return graph_ != nullptr; }
  /// Whether a capture was tried and threw to the caller of step() (OnCaptureFailure::raise). The
  /// host's side of that step (step counts, the schedule, generator offsets) had run, its GPU work
  /// had not: going on is not the eager run's result.
  bool captureFailed() const { return capture_failed_; }
  /// With OnCaptureFailure::run_eagerly, after a capture failed: CUDA's reason ("" before); every
  /// step runs eagerly from then on.
  const std::string& eagerBecause() const { return eager_because_; }

 private:
  Tensor eager(const Tensor& input, const Tensor& target);
  void capture(const Tensor& input, const Tensor& target);
  void replay();

  Engine& engine_;
  LossFn loss_;
  int warmup_;
  OnCaptureFailure on_failure_;
  int64_t replays_ = 0;
  bool capture_failed_ = false;
  std::string eager_because_;
  // Eager steps so far per batch shape (input's and target's shapes and dtypes, flattened).
  std::vector<std::pair<std::vector<int64_t>, int>> eager_steps_;
  std::unique_ptr<cuda::Graph> graph_;
  std::unique_ptr<kernels::PhiloxCapture> philox_;
  Tensor static_input_, static_target_, static_loss_;
};

}  // namespace lockstep::parallel
