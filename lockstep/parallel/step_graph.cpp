#include "lockstep/parallel/step_graph.h"

#include "lockstep/nn/dropout.h"
#include "lockstep/nn/language_model.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/graph.h"
#else
namespace lockstep::cuda {
class Graph {};  // never made without CUDA; complete, so that graph_'s destructor compiles
}  // namespace lockstep::cuda
#endif

namespace lockstep::parallel {

namespace {
bool hasDropout(const nn::Module& m) {
  if (auto* d = dynamic_cast<const nn::Dropout*>(&m); d && d->options().p > 0) return true;
  for (const auto& c : m.children()) {
    if (hasDropout(*c)) return true;
  }
  return false;
}
}  // namespace

std::string stepGraphBlocker(const Engine& engine) {
  const EngineOptions& o = engine.options();
  if (!engine.model()->device().isCuda()) return "the model is not on a GPU";
  if (!builtWithCuda()) return "this lockstep was built without CUDA";
  if (engine.environment().group) return "several ranks (collectives are not captured yet)";
  if (engine.zero()) return "ZeRO";
  if (engine.lossScaler()) return "a loss scaler (it decides on the host whether a step is skipped)";
  if (o.gradient_clipping > 0) return "gradient clipping (the norm is read on the host)";
  if (o.gradient_accumulation_steps != 1) return "gradient accumulation";
  if (engine.scheduler()) return "an LR schedule (the rate would be baked into the graph)";
  if (engine.optimizer()->name() != "SGD") {
    return "optimizer " + engine.optimizer()->name() + " (only SGD's update is the same every step)";
  }
  if (dynamic_cast<const nn::LanguageModel*>(engine.model().get())) {
    return "a language model (its dropout masks come from the host's generator)";
  }
  if (hasDropout(*engine.model())) return "dropout (its masks come from the host's generator)";
  return "";
}

StepGraph::StepGraph(Engine& engine, LossFn loss, int warmup_steps)
    : engine_(engine), loss_(std::move(loss)), warmup_(warmup_steps) {
  const std::string why = stepGraphBlocker(engine);
  LOCKSTEP_ENFORCE(why.empty(), ValueError, "this training step cannot be replayed as a CUDA graph: ", why);
  LOCKSTEP_ENFORCE(warmup_steps >= 1, ValueError, "StepGraph: warmup_steps must be >= 1, got ", warmup_steps);
}

StepGraph::~StepGraph() = default;

Tensor StepGraph::eager(const Tensor& input, const Tensor& target) {
  autograd::Variable loss = loss_(engine_.forward(autograd::Variable(input)), target);
  engine_.backward(loss);
  engine_.step();
  return loss.tensor();
}

#if LOCKSTEP_WITH_CUDA

Tensor StepGraph::step(const Tensor& input, const Tensor& target) {
  const bool same_shapes = static_input_.defined() && input.shape() == static_input_.shape() &&
                           target.shape() == static_target_.shape() && input.dtype() == static_input_.dtype() &&
                           target.dtype() == static_target_.dtype();
  if (graph_ && same_shapes) {
    static_input_.copyFrom(input);
    static_target_.copyFrom(target);
    graph_->replay();
    engine_.countReplayedStep();
    ++replays_;
    return static_loss_;
  }
  if (graph_ || ++eager_steps_ <= warmup_) return eager(input, target);
  // Capture: the step's GPU work is recorded (its host side, the engine's step count, happens
  // now), then the first replay does the work of this step.
  static_input_ = input.clone();
  static_target_ = target.clone();
  auto g = std::make_unique<cuda::Graph>();
  g->capture(input.device().index, [&] { static_loss_ = eager(static_input_, static_target_); });
  graph_ = std::move(g);
  graph_->replay();
  ++replays_;
  return static_loss_;
}

#else

Tensor StepGraph::step(const Tensor& input, const Tensor& target) { return eager(input, target); }

#endif

}  // namespace lockstep::parallel
