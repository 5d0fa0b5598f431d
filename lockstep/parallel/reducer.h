#pragma once
// The Reducer: averages gradients across ranks while backward is still running (c10d's reducer).
// Parameters are grouped into buckets (bucket_assignment.h); each parameter's gradient-ready hook
// copies its gradient into its bucket (or finds it already there with gradient_as_bucket_view);
// a full bucket is launched through the comm hook as soon as every earlier bucket was launched, so
// all ranks issue the same collectives in the same order; when the last bucket is launched, the
// reducer waits for all of them and writes the averaged gradients back — all before backward()
// returns, so the optimizer always reads synchronized gradients.
#include <memory>
#include <string>
#include <vector>

#include "lockstep/autograd/variable.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/parallel/bucket_assignment.h"
#include "lockstep/parallel/comm_hook.h"

namespace lockstep::parallel {

struct ReducerOptions {
  BucketAssignmentOptions buckets;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
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
  void prepareForBackward(const autograd::Variable& output);
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
  void launchReadyBuckets();
  void finalize();
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
};

}  // namespace lockstep::parallel
