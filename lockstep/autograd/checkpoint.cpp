#include "lockstep/autograd/checkpoint.h"

#include <chrono>
#include <memory>
#include <optional>

#include "lockstep/autograd/autocast.h"
#include "lockstep/autograd/function.h"
#include "lockstep/util/error.h"

namespace lockstep::autograd {

namespace {

thread_local CheckpointProfile g_profile;
thread_local CheckpointStash* g_stash = nullptr;

// Makes stash the current one for a scope (the previous comes back after).
class StashScope {
 public:
  explicit StashScope(CheckpointStash* stash) : previous_(g_stash) { g_stash = stash; }
  ~StashScope() { g_stash = previous_; }
  StashScope(const StashScope&) = delete;
  StashScope& operator=(const StashScope&) = delete;

 private:
  CheckpointStash* previous_;
};

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct GeneratorState {
  Generator* gen;
  uint64_t seed, offset;
};

std::vector<GeneratorState> snapshot(const std::vector<Generator*>& gens) {
  std::vector<GeneratorState> out;
  out.reserve(gens.size());
  for (Generator* g : gens) out.push_back({g, g->seed(), g->offset()});
  return out;
}

void restore(const std::vector<GeneratorState>& states) {
  for (const auto& s : states) s.gen->setState(s.seed, s.offset);
}

class CheckpointBackward final : public Node {
 public:
  CheckpointBackward(Segment segment, std::vector<Variable> inputs, std::vector<GeneratorState> rng,
                     std::optional<DType> autocast_dtype, std::shared_ptr<CheckpointStash> stash)
      : segment_(std::move(segment)),
        inputs_(std::move(inputs)),
        rng_(std::move(rng)),
        autocast_dtype_(autocast_dtype),
        stash_(std::move(stash)) {}

  std::vector<Tensor> apply(const Tensor& grad_output) override {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Generator*> gens;
    for (const auto& s : rng_) gens.push_back(s.gen);
    const std::vector<GeneratorState> now = snapshot(gens);
    std::vector<Variable> leaves;
    leaves.reserve(inputs_.size());
    for (const Variable& v : inputs_) {
      leaves.push_back(v.defined() ? Variable(v.tensor(), v.requiresGrad()) : Variable());
    }
    Variable out;
    {
      restore(rng_);
      bool prev = isGradEnabled();
      setGradEnabled(true);
      if (stash_) {
        stash_->replay = true;
        stash_->next = 0;
      }
      StashScope stash_scope(stash_.get());
      try {
        if (autocast_dtype_) {
          AutocastGuard guard(*autocast_dtype_);
          out = segment_(leaves);
        } else {
          AutocastGuard off(DType::bf16, /*enabled=*/false);
          out = segment_(leaves);
        }
      } catch (...) {
        setGradEnabled(prev);
        restore(now);
        throw;
      }
      setGradEnabled(prev);
      restore(now);
    }
    stash_.reset();  // the recomputed graph holds what it needs
    g_profile.recomputes++;
    g_profile.recompute_seconds += secondsSince(t0);
    auto t1 = std::chrono::steady_clock::now();
    LOCKSTEP_ENFORCE(out.defined() && out.shape() == grad_output.shape(), ValueError,
                     "checkpoint: the recomputed segment returned a different shape than its first run; the "
                     "segment must be a pure function of its inputs");
    if (out.requiresGrad()) out.backward(grad_output);
    g_profile.backward_seconds += secondsSince(t1);
    std::vector<Tensor> grads;
    grads.reserve(leaves.size());
    for (const Variable& l : leaves) grads.push_back(l.defined() && l.requiresGrad() ? l.grad() : Tensor());
    return grads;
  }
  std::string name() const override { return "CheckpointBackward"; }
  void releaseSaved() override {
    inputs_.clear();
    segment_ = nullptr;
    stash_.reset();
  }

 private:
  Segment segment_;
  std::vector<Variable> inputs_;
  std::vector<GeneratorState> rng_;
  std::optional<DType> autocast_dtype_;
  std::shared_ptr<CheckpointStash> stash_;  // null inside another checkpointed segment
};

}  // namespace

Variable checkpoint(const Segment& segment, const std::vector<Variable>& inputs,
                    const CheckpointOptions& options) {
  LOCKSTEP_ENFORCE(segment != nullptr, ValueError, "checkpoint: the segment is empty");
  if (!isGradEnabled()) return segment(inputs);
  std::vector<Generator*> gens{&defaultGenerator()};
  for (Generator* g : options.generators) {
    LOCKSTEP_ENFORCE(g != nullptr, ValueError, "checkpoint: a listed generator is null");
    bool seen = false;
    for (Generator* h : gens) seen = seen || h == g;
    if (!seen) gens.push_back(g);
  }
  std::vector<GeneratorState> rng = snapshot(gens);
  auto t0 = std::chrono::steady_clock::now();
  Tensor out;
  // Nested in another checkpointed segment (its first run or its recomputation), this one uses the
  // outer stash: both runs of the outer segment then see the same calls in the same order.
  std::shared_ptr<CheckpointStash> stash = g_stash ? nullptr : std::make_shared<CheckpointStash>();
  {
    // The first run records no graph: only the output survives. The node is attached even when no
    // input requires a gradient, since the segment's parameters may (unlike torch's reentrant
    // checkpoint, which then leaves them without gradients).
    NoGradGuard no_grad;
    StashScope stash_scope(stash ? stash.get() : g_stash);
    out = segment(inputs).tensor();
  }
  g_profile.segments++;
  g_profile.forward_seconds += secondsSince(t0);
  // The inputs' values only (detached leaves carrying whether each wants a gradient): holding the
  // Variables would keep the graph before the segment alive from inside it.
  std::vector<Variable> saved;
  saved.reserve(inputs.size());
  for (const Variable& v : inputs)
    saved.push_back(v.defined() ? Variable(v.tensor(), v.requiresGrad()) : Variable());
  // One edge per input; the segment's parameters get their gradients inside the recomputation.
  auto node = std::make_shared<CheckpointBackward>(segment, std::move(saved), std::move(rng), autocastDType(),
                                                   std::move(stash));
  for (const Variable& v : inputs)
    node->edges().push_back(v.defined() && v.requiresGrad() ? v.gradEdge() : nullptr);
  return Variable::makeResult(std::move(out), std::move(node));
}

CheckpointStash* checkpointStash() { return g_stash; }

const std::vector<Tensor>* CheckpointStash::take() {
  if (!replay || next >= saved.size()) return nullptr;
  g_profile.stash_reuses++;
  return &saved[next++];
}

CheckpointProfile checkpointProfile() { return g_profile; }
void resetCheckpointProfile() { g_profile = {}; }

}  // namespace lockstep::autograd
