#pragma once
// DistributedDataParallel: n ranks train one model and get what one process with an n-times larger
// batch would get (torch.nn.parallel.DistributedDataParallel). Wrap a module; call forward, loss,
// backward and the optimizer as usual: gradients are averaged across ranks by bucketed allreduce
// overlapped with backward (reducer.h), and are synchronized when backward() returns.
#include <functional>
#include <memory>
#include <string>

#include "lockstep/comm/process_group.h"
#include "lockstep/nn/module.h"
#include "lockstep/parallel/ddp/reducer.h"

namespace lockstep::parallel {

using autograd::Variable;

struct DistributedDataParallelOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  /// Parameters the forward's graph does not reach are reduced as zeros instead of stalling.
  bool find_unused_parameters = false;
  /// Gradients live inside the communication buckets: nothing is copied back after the allreduce.
  /// After Optimizer::zeroGrad() (set_to_none) each new gradient is copied into its bucket as it
  /// becomes ready; after zeroGrad(false) backward adds into the zeroed views in place.
  bool gradient_as_bucket_view = false;
  /// Rank 0's buffers (e.g. batch-norm running stats) are broadcast before every forward.
  bool broadcast_buffers = true;
  /// "allreduce" (default), "fp16_compress" or "bf16_compress"; or registerCommHook() your own.
  /// "noop" synchronises nothing (ranks train apart): only for measuring the headroom.
  std::string comm_hook = "allreduce";
};

class DistributedDataParallel : public nn::Module {
 public:
  /// Collective. Checks that every rank has the same parameter names, shapes and dtypes (a
  /// ValueError lists the first difference and the ranks), then broadcasts rank 0's parameters and
  /// buffers. The wrapped module is registered as "module" (state dict keys "module.<name>", as in
  /// PyTorch).
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<comm::ProcessGroup> group,
                          const DistributedDataParallelOptions& opts = {});

  /// Runs the wrapped module; in training mode with gradients enabled, arms the reducer for this
  /// output's backward. Collective when broadcast_buffers and the module has buffers.
  Variable forward(const Variable& x) override;
  /// forward() around `run`, which runs the wrapped module its own way and returns what backward
  /// starts from (a language model's forwardLoss: the loss itself). The reducer is armed for that.
  Variable forwardWith(const std::function<Variable()>& run);

  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& modulePtr() const { return module_; }
  comm::ProcessGroup& group() { return *group_; }
  Reducer& reducer() { return *reducer_; }
  void registerCommHook(std::unique_ptr<CommHook> hook) { reducer_->setCommHook(std::move(hook)); }
  /// Where the synchronized iterations' time went on this rank (torch's DDP logging data
  /// avg_*_time): forward, backward compute, communication and how long backward waited for it.
  /// A large backward_comm_wait_ms on one rank only means the other ranks are slower (stragglers).
  ReducerTimings timings() const { return reducer_->timings(); }
  void resetTimings() { reducer_->resetTimings(); }

  /// RAII (DDP.no_sync()): while alive, backward accumulates gradients locally without
  /// communication; the first backward after it reduces the accumulated gradients.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer& r) : reducer_(r), prev_(r.syncEnabled()) { r.setSyncEnabled(false); }
    ~NoSyncGuard() { reducer_.setSyncEnabled(prev_); }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    Reducer& reducer_;
    bool prev_;
  };
  [[nodiscard]] std::unique_ptr<NoSyncGuard> noSync() { return std::make_unique<NoSyncGuard>(*reducer_); }

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<comm::ProcessGroup> group_;
  DistributedDataParallelOptions opts_;
  std::unique_ptr<Reducer> reducer_;
};

/// One line of key=value pairs, e.g. "iterations=938 forward_compute_ms=1.210 ...".
std::string formatTimings(const ReducerTimings& t);

}  // namespace lockstep::parallel
