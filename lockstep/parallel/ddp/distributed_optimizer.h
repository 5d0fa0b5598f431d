#pragma once
// DistributedOptimizer in Horovod's style (hvd.DistributedOptimizer): wraps any optimizer and
// averages gradients across ranks when step() is called, packing them into fused buffers of up to
// fusion_threshold_bytes (Horovod's tensor fusion) so many small gradients travel as few messages.
// Unlike DistributedDataParallel it needs no model wrapper and communicates at step time.
#include <memory>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/optim/optimizer.h"

namespace lockstep::parallel {

enum class Compression { none, fp16 };

struct DistributedOptimizerOptions {
  size_t fusion_threshold_bytes = 64u << 20;  // HOROVOD_FUSION_THRESHOLD's default
  Compression compression = Compression::none;
  /// Gradients of this many backward passes accumulate locally before one averaged step.
  int backward_passes_per_step = 1;
};

class DistributedOptimizer {
 public:
  DistributedOptimizer(std::shared_ptr<optim::Optimizer> optimizer, std::shared_ptr<comm::ProcessGroup> group,
                       const DistributedOptimizerOptions& opts = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  /// Collective. Averages the accumulated gradients across ranks, then steps the wrapped
  /// optimizer. ValueError when fewer or more than backward_passes_per_step backward passes
  /// produced gradients since the last step (it names the count).
  void step();
  /// Averages the gradients without stepping (Horovod's synchronize()). Collective.
  void synchronize();
  void zeroGrad(bool set_to_none = true) { optimizer_->zeroGrad(set_to_none); }
  optim::Optimizer& optimizer() { return *optimizer_; }

 private:
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<comm::ProcessGroup> group_;
  DistributedOptimizerOptions opts_;
  std::vector<autograd::Variable> params_;
  std::vector<size_t> hook_ids_;
  std::vector<int> passes_;  // backward passes that reached each parameter since the last step
  Tensor fusion_;            // reused fusion buffer
  Tensor wire_;              // reused fp16 buffer
};

/// Copies root's parameter values to every rank (hvd.broadcast_parameters). Collective.
void broadcastParameters(const std::vector<autograd::Variable>& params, comm::ProcessGroup& group,
                         int root = 0);
/// Copies root's optimizer state (hyper-parameters and per-parameter buffers) to every rank
/// (hvd.broadcast_optimizer_state). Collective.
void broadcastOptimizerState(optim::Optimizer& optimizer, comm::ProcessGroup& group, int root = 0);

}  // namespace lockstep::parallel
