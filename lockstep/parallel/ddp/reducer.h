#pragma once
// The Reducer: averages gradients across ranks while backward is still running (c10d's reducer).
// Parameters are grouped into buckets (bucket_assignment.h); each parameter's gradient-ready hook
// copies its gradient into its bucket (or finds it already there with gradient_as_bucket_view);
// a full bucket is launched through the comm hook as soon as every earlier bucket was launched, so
// all ranks issue the same collectives in the same order; when the last bucket is launched, the
// reducer waits for all of them and writes the averaged gradients back — all before backward()
// returns, so the optimizer always reads synchronized gradients.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/autograd/variable.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/parallel/ddp/bucket_assignment.h"
#include "lockstep/parallel/ddp/comm_hook.h"

namespace lockstep::parallel {

struct ReducerOptions {
  BucketAssignmentOptions buckets;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  /// true: when the last bucket is launched, backward waits for every bucket and writes the
  /// averaged gradients back (DDP). false: it only launches; finishIteration() waits and writes
  /// back (a pipeline stage sends its input's gradient on before its replicas' sums complete).
  bool finalize_in_backward = true;
};

/// Where the time of synchronized iterations went (PyTorch DDP's logging data, avg_*_time), as
/// means over `iterations` in milliseconds. Iterations under no_sync are not counted.
struct ReducerTimings {
  int64_t iterations = 0;
  /// The wrapped module's forward.
  double forward_compute_ms = 0;
  /// From the first parameter gradient produced by backward to the last one.
  double backward_compute_ms = 0;
  /// From the first bucket launched to every bucket reduced and written back.
  double backward_comm_ms = 0;
  /// The part of backward_comm that ran while backward was still producing gradients.
  double backward_compute_comm_overlap_ms = 0;
  /// From the last gradient produced to every bucket reduced: how long backward() was held by
  /// communication, including the wait for slower ranks to reach the same bucket.
  double backward_comm_wait_ms = 0;
};

class Reducer {
 public:
  /// params in registration order with their names (for messages). Registers hooks on them.
  Reducer(std::vector<autograd::Variable> params, std::vector<std::string> names,
          std::shared_ptr<comm::ProcessGroup> group, const ReducerOptions& opts);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Arms the reducer for the backward pass of `output` (called by DDP's forward in training).
  /// With find_unused_parameters, parameters the output's graph does not reach are marked ready
  /// now. Throws when the previous armed iteration never finished its reduction (a parameter got
  /// no gradient), naming those parameters.
  /// forward_time: how long the forward that produced `output` took (for timings()).
  void prepareForBackward(const autograd::Variable& output,
                          std::chrono::steady_clock::duration forward_time = {});
  /// Completes the armed iteration: every parameter whose gradient did not become ready in its
  /// backward takes part with the gradient it has (accumulated earlier, e.g. under no_sync) or
  /// zeros, the remaining buckets are launched, and all are waited for and written back. Nothing
  /// when the iteration already finished. Collective over the group (every rank calls it alike).
  void finishIteration();
  /// While disabled (DDP's no_sync), hooks do nothing and gradients accumulate locally.
  void setSyncEnabled(bool on) { sync_enabled_ = on; }
  bool syncEnabled() const { return sync_enabled_; }
  void setCommHook(std::unique_ptr<CommHook> hook) { hook_ = std::move(hook); }

  /// Bucket index -> parameter indices (launch order).
  const std::vector<std::vector<size_t>>& bucketAssignment() const { return assignment_; }
  /// Buckets launched during the last backward, in launch order (for tests of overlap/order).
  const std::vector<int>& lastLaunchOrder() const { return launch_order_; }
  /// How many buckets were launched before the last gradient of that backward became ready
  /// (evidence that communication overlapped backward).
  int launchedBeforeLastReady() const { return launched_before_last_ready_; }
  /// Means over the synchronized iterations since construction or resetTimings().
  ReducerTimings timings() const;
  void resetTimings() { sums_ = {}; }

 private:
  struct Slot {
    size_t bucket;
    int64_t offset;
    int64_t numel;
  };
  struct Bucket {
    GradBucket grad;
    std::vector<size_t> params;
    size_t pending = 0;
    std::shared_ptr<comm::Work> work;
  };

  void onGradReady(size_t param);
  void markReady(size_t param);
  /// Marks a parameter whose gradient backward did not produce ready: its own gradient, or zeros.
  void markWithoutBackward(size_t param);
  void launchReadyBuckets();
  void finalize();
  void recordTimings();
  Tensor slotView(size_t param) const;

  std::vector<autograd::Variable> params_;
  std::vector<std::string> names_;
  std::shared_ptr<comm::ProcessGroup> group_;
  ReducerOptions opts_;
  std::unique_ptr<CommHook> hook_;
  std::vector<std::vector<size_t>> assignment_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> hook_ids_;
  std::vector<bool> ready_;
  size_t next_launch_ = 0;
  bool armed_ = false;
  bool sync_enabled_ = true;
  std::vector<int> launch_order_;
  int launched_before_last_ready_ = 0;
  size_t ready_count_ = 0;

  // This iteration's events (steady_clock), and the sums timings() averages.
  using Clock = std::chrono::steady_clock;
  Clock::duration forward_time_{};
  Clock::time_point first_grad_, last_grad_, first_launch_;
  bool saw_grad_ = false;
  struct Sums {
    int64_t iterations = 0;
    Clock::duration forward{}, backward_compute{}, comm{}, overlap{}, comm_wait{};
  } sums_;
};

}  // namespace lockstep::parallel
