#include "lockstep/parallel/ddp/reducer.h"

#include <algorithm>
#include <sstream>
#include <unordered_set>

#include "lockstep/autograd/node.h"

namespace lockstep::parallel {

using autograd::Variable;

Reducer::Reducer(std::vector<Variable> params, std::vector<std::string> names,
                 std::shared_ptr<comm::ProcessGroup> group, const ReducerOptions& opts)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      opts_(opts),
      hook_(std::make_unique<AllreduceHook>()) {
  LOCKSTEP_CHECK(params_.size() == names_.size());
  LOCKSTEP_ENFORCE(group_ != nullptr, ValueError, "DistributedDataParallel needs a process group");
  std::vector<size_t> bytes;
  std::vector<DType> dtypes;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Variable& p = params_[i];
    LOCKSTEP_ENFORCE(p.requiresGrad() && isFloating(p.dtype()), ValueError, "parameter '", names_[i],
                     "' must be a floating leaf that requires grad");
    bytes.push_back(p.tensor().nbytes());
    dtypes.push_back(p.dtype());
  }
  assignment_ = assignBuckets(bytes, dtypes, opts_.buckets);
  slots_.resize(params_.size());
  buckets_.resize(assignment_.size());
  for (size_t b = 0; b < assignment_.size(); ++b) {
    int64_t total = 0;
    for (size_t p : assignment_[b]) {
      slots_[p] = {b, total, params_[p].numel()};
      total += params_[p].numel();
    }
    Bucket& bucket = buckets_[b];
    bucket.params = assignment_[b];
    bucket.grad.index = static_cast<int>(b);
    bucket.grad.group = group_.get();
    bucket.grad.last = b + 1 == assignment_.size();
    const Tensor& first = params_[assignment_[b].front()].tensor();
    bucket.grad.buffer = Tensor::zeros({total}, first.dtype(), first.device());  // where the gradients are
  }
  if (opts_.gradient_as_bucket_view) {
    for (size_t p = 0; p < params_.size(); ++p) {
      Tensor view = slotView(p);
      if (params_[p].hasGrad()) view.copyFrom(params_[p].grad());
      params_[p].setGrad(view);
    }
  }
  ready_.assign(params_.size(), false);
  for (size_t p = 0; p < params_.size(); ++p) {
    hook_ids_.push_back(params_[p].registerGradReadyHook([this, p](Variable&) { onGradReady(p); }));
  }
}

Reducer::~Reducer() {
  for (size_t p = 0; p < params_.size(); ++p) params_[p].removeGradReadyHook(hook_ids_[p]);
}

Tensor Reducer::slotView(size_t p) const {
  const Slot& s = slots_[p];
  return buckets_[s.bucket].grad.buffer.narrow(0, s.offset, s.numel).view(params_[p].shape());
}

void Reducer::prepareForBackward(const Variable& output, Clock::duration forward_time) {
  if (armed_ && ready_count_ > 0) {
    std::ostringstream names;
    int listed = 0;
    for (size_t p = 0; p < params_.size(); ++p) {
      if (!ready_[p]) names << (listed++ ? ", " : "") << names_[p];
    }
    throw ValueError(
        "DistributedDataParallel: the previous iteration's gradient reduction did not finish because these "
        "parameters received no gradient: " +
        names.str() +
        ". If some parameters are legitimately unused in forward, construct DistributedDataParallel with "
        "find_unused_parameters=true; otherwise make every output of forward take part in the loss.");
  }
  std::fill(ready_.begin(), ready_.end(), false);
  ready_count_ = 0;
  next_launch_ = 0;
  launch_order_.clear();
  launched_before_last_ready_ = 0;
  forward_time_ = forward_time;
  saw_grad_ = false;
  for (Bucket& b : buckets_) {
    b.pending = b.params.size();
    b.work.reset();
  }
  armed_ = true;
  if (!opts_.find_unused_parameters || !sync_enabled_) return;
  // Mark what the output's graph cannot reach as ready now, so its bucket still completes.
  std::unordered_set<const autograd::VariableImpl*> reached;
  std::unordered_set<const autograd::Node*> seen;
  std::vector<const autograd::Node*> stack;
  if (output.gradFn()) stack.push_back(output.gradFn().get());
  while (!stack.empty()) {
    const autograd::Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (auto* acc = dynamic_cast<const autograd::AccumulateGrad*>(n)) reached.insert(acc->leaf());
    for (const auto& e : n->edges()) {
      if (e) stack.push_back(e.get());
    }
  }
  if (output.isLeaf() && output.requiresGrad()) reached.insert(output.impl().get());
  for (size_t p = 0; p < params_.size(); ++p)
    if (!reached.count(params_[p].impl().get())) markWithoutBackward(p);
}

void Reducer::markWithoutBackward(size_t p) {
  Tensor view = slotView(p);
  if (params_[p].hasGrad() && !params_[p].grad().sharesStorage(view)) {
    view.copyFrom(params_[p].grad());
  } else if (!params_[p].hasGrad() || !opts_.gradient_as_bucket_view) {
    view.zero();
  }
  markReady(p);
}

void Reducer::finishIteration() {
  if (!armed_) return;
  for (size_t p = 0; p < params_.size(); ++p)
    if (!ready_[p]) markWithoutBackward(p);
  if (armed_) finalize();
}

void Reducer::onGradReady(size_t p) {
  if (!armed_ || !sync_enabled_) return;
  last_grad_ = Clock::now();
  if (!saw_grad_) {
    first_grad_ = last_grad_;
    saw_grad_ = true;
  }
  Tensor view = slotView(p);
  const Tensor& g = params_[p].grad();
  bool in_place = g.sharesStorage(view) && g.devicePtr() == view.devicePtr() && g.strides() == view.strides();
  if (!in_place) {
    view.copyFrom(g);
    if (opts_.gradient_as_bucket_view) params_[p].setGrad(view);
  }
  markReady(p);
}

void Reducer::markReady(size_t p) {
  LOCKSTEP_CHECK(!ready_[p], "gradient of '", names_[p], "' became ready twice in one backward pass");
  ready_[p] = true;
  ++ready_count_;
  Bucket& b = buckets_[slots_[p].bucket];
  LOCKSTEP_CHECK(b.pending > 0);
  if (ready_count_ == params_.size()) launched_before_last_ready_ = static_cast<int>(next_launch_);
  if (--b.pending == 0) launchReadyBuckets();
  if (next_launch_ == buckets_.size() && opts_.finalize_in_backward) finalize();
}

void Reducer::launchReadyBuckets() {
  // Launch strictly in bucket order so every rank issues the same collectives in the same order.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_];
    if (next_launch_ == 0) first_launch_ = Clock::now();
    b.work = hook_->launch(b.grad);
    launch_order_.push_back(static_cast<int>(next_launch_));
    ++next_launch_;
  }
}

void Reducer::finalize() {
  armed_ = false;
  for (Bucket& b : buckets_) {
    if (b.work) b.work->wait();
    hook_->finish(b.grad);
    b.work.reset();
  }
  for (size_t p = 0; p < params_.size(); ++p) {
    Tensor view = slotView(p);
    if (opts_.gradient_as_bucket_view) {
      if (!params_[p].grad().sharesStorage(view)) params_[p].setGrad(view);
    } else if (params_[p].hasGrad()) {
      Tensor g = params_[p].grad();
      g.copyFrom(view);
    } else {
      params_[p].setGrad(view.clone());
    }
  }
  recordTimings();
}

void Reducer::recordTimings() {
  const Clock::time_point done = Clock::now();
  // Parameters marked ready up front (find_unused_parameters) can launch buckets before backward
  // produced any gradient; the comm then starts no earlier than backward's first gradient.
  const Clock::time_point compute_start = saw_grad_ ? first_grad_ : first_launch_;
  const Clock::time_point compute_end = saw_grad_ ? last_grad_ : first_launch_;
  const Clock::time_point launch = std::max(first_launch_, compute_start);
  ++sums_.iterations;
  sums_.forward += forward_time_;
  sums_.backward_compute += compute_end - compute_start;
  sums_.comm += done - launch;
  sums_.overlap += std::max(compute_end - launch, Clock::duration::zero());
  sums_.comm_wait += done - std::max(compute_end, launch);
}

ReducerTimings Reducer::timings() const {
  ReducerTimings t;
  t.iterations = sums_.iterations;
  if (t.iterations == 0) return t;
  auto mean = [&](Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count() / static_cast<double>(t.iterations);
  };
  t.forward_compute_ms = mean(sums_.forward);
  t.backward_compute_ms = mean(sums_.backward_compute);
  t.backward_comm_ms = mean(sums_.comm);
  t.backward_compute_comm_overlap_ms = mean(sums_.overlap);
  t.backward_comm_wait_ms = mean(sums_.comm_wait);
  return t;
}

}  // namespace lockstep::parallel
