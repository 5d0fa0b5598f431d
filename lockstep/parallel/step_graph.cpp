#include "lockstep/parallel/step_graph.h"

#include <algorithm>

#include "lockstep/kernels/graph_capture.h"
#include "lockstep/kernels/philox_capture.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/graph.h"
#else
namespace lockstep::cuda {
class Graph {};  // never made without CUDA; complete, so that graph_'s destructor compiles
}  // namespace lockstep::cuda
#endif

namespace lockstep::parallel {

StepGraphFacts stepGraphFacts(const Engine& engine) {
  const EngineOptions& o = engine.options();
  StepGraphFacts f;
  f.model_on_gpu = engine.model()->device().isCuda();
  f.built_with_cuda = builtWithCuda();
  f.several_ranks = engine.environment().group != nullptr;
  f.zero = engine.zero() != nullptr;
  f.loss_scaler = engine.lossScaler() != nullptr;
  f.gradient_accumulation_steps = o.gradient_accumulation_steps;
  f.optimizer = engine.optimizer()->name();
  return f;
}

std::string stepGraphBlocker(const StepGraphFacts& f) {
  if (!f.model_on_gpu) return "the model is not on a GPU";
  if (!f.built_with_cuda) return "this lockstep was built without CUDA";
  if (f.several_ranks) return "several ranks (collectives are not captured yet)";
  if (f.zero) return "ZeRO";
  if (f.loss_scaler) return "a loss scaler (it decides on the host whether a step is skipped)";
  if (f.gradient_accumulation_steps != 1) return "gradient accumulation";
  if (f.optimizer != "SGD" && f.optimizer != "Adam" && f.optimizer != "AdamW") {
    return "optimizer " + f.optimizer + " (only SGD's, Adam's and AdamW's updates are captured)";
  }
  return "";
}

std::string stepGraphBlocker(const Engine& engine) { return stepGraphBlocker(stepGraphFacts(engine)); }

StepGraph::StepGraph(Engine& engine, LossFn loss, int warmup_steps, OnCaptureFailure on_failure)
    : engine_(engine), loss_(std::move(loss)), warmup_(warmup_steps), on_failure_(on_failure) {
  const std::string why = stepGraphBlocker(engine);
  LOCKSTEP_ENFORCE(why.empty(), ValueError, "this training step cannot be replayed as a CUDA graph: ", why);
  LOCKSTEP_ENFORCE(warmup_steps >= 1, ValueError, "StepGraph: warmup_steps must be >= 1, got ", warmup_steps);
}

StepGraph::~StepGraph() {
  graph_.reset();
  // The optimizer no longer feeds a graph: its next capture (another StepGraph) starts afresh.
  if (philox_) engine_.optimizer()->discardCapture();
}

Tensor StepGraph::eager(const Tensor& input, const Tensor& target) {
  autograd::Variable loss = loss_(input, target);
  engine_.backward(loss);
  engine_.step();
  return loss.tensor();
}

#if LOCKSTEP_WITH_CUDA

Tensor StepGraph::step(const Tensor& input, const Tensor& target) {
  const bool same_shapes = static_input_.defined() && input.shape() == static_input_.shape() &&
                           target.shape() == static_target_.shape() &&
                           input.dtype() == static_input_.dtype() && target.dtype() == static_target_.dtype();
  if (graph_ && same_shapes) {
    static_input_.copyFrom(input);
    static_target_.copyFrom(target);
    replay();
    return static_loss_;
  }
  if (graph_ || !eager_because_.empty()) return eager(input, target);
  std::vector<int64_t> key{static_cast<int64_t>(input.dtype()), static_cast<int64_t>(target.dtype())};
  for (const Tensor* t : {&input, &target}) {
    key.push_back(t->dim());
    for (int64_t d : t->shape()) key.push_back(d);
  }
  auto it =
      std::find_if(eager_steps_.begin(), eager_steps_.end(), [&](const auto& e) { return e.first == key; });
  if (it == eager_steps_.end()) it = eager_steps_.insert(eager_steps_.end(), {std::move(key), 0});
  if (++it->second <= warmup_) return eager(input, target);
  if (on_failure_ == OnCaptureFailure::raise) {
    capture(input, target);
    return static_loss_;
  }
  // The capture runs the step's host side and records its GPU work without running it: if CUDA
  // refuses the capture, the host side is put back and the step runs eagerly, as will every later
  // one (a step that fails to capture once would again).
  const Engine::HostStepState before = engine_.hostStepState();
  try {
    capture(input, target);
  } catch (const std::exception& e) {
    // After the capture (not a refusal to capture), or a stream left capturing (what runs next
    // would be recorded, not run): no eager step can follow.
    if (!capture_failed_ || kernels::isCapturingGraph(input.device())) throw;
    engine_.restoreHostStepState(before);
    static_input_ = static_target_ = static_loss_ = Tensor();
    capture_failed_ = false;
    eager_because_ = e.what();
    return eager(input, target);
  }
  return static_loss_;
}

void StepGraph::capture(const Tensor& input, const Tensor& target) {
  // The step's GPU work is recorded, and its host side (step counts, generator offsets, the
  // schedule, the engine's count) happens now, as in an eager step; then the first launch does the
  // work of this step, with the scalars and generator states the capture found (written after it).
  static_input_ = input.clone();
  static_target_ = target.clone();
  optim::Optimizer& optimizer = *engine_.optimizer();
  auto philox = std::make_unique<kernels::PhiloxCapture>(input.device());  // its memory: before the capture
  auto g = std::make_unique<cuda::Graph>();
  optimizer.beginCapture();
  philox->begin();
  try {
    g->capture(input.device().index, [&] { static_loss_ = eager(static_input_, static_target_); });
  } catch (...) {
    optimizer.discardCapture();
    philox->rollBack();  // the generators as the capture found them
    capture_failed_ = true;
    throw;
  }
  philox->end();
  optimizer.endCapture();
  graph_ = std::move(g);
  philox_ = std::move(philox);
  graph_->replay();
  ++replays_;
}

void StepGraph::replay() {
  // The host side of the step, as Engine::step() would do it around the captured work: the
  // optimizer's scalars and the generators' states for this step (queued before the launch), the
  // schedule after the update.
  optim::Optimizer& optimizer = *engine_.optimizer();
  if (optimizer.hasCapture()) optimizer.replayStep();  // a step that updated nothing recorded nothing
  philox_->prepareReplay();
  graph_->replay();
  if (engine_.scheduler()) engine_.scheduler()->step();
  engine_.countReplayedStep();
  ++replays_;
}

#else

Tensor StepGraph::step(const Tensor& input, const Tensor& target) { return eager(input, target); }
void StepGraph::capture(const Tensor&, const Tensor&) {}
void StepGraph::replay() {}

#endif

}  // namespace lockstep::parallel
