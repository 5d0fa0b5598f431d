#include "lockstep/parallel/ddp/distributed_data_parallel.h"

#include <chrono>
#include <cstdio>

#include "lockstep/autograd/variable.h"
#include "lockstep/parallel/model_sync.h"

namespace lockstep::parallel {

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<comm::ProcessGroup> group,
                                                 const DistributedDataParallelOptions& opts)
    : nn::Module("DistributedDataParallel"),
      module_(std::move(module)),
      group_(std::move(group)),
      opts_(opts) {
  LOCKSTEP_ENFORCE(module_ != nullptr, ValueError, "DistributedDataParallel: module is null");
  LOCKSTEP_ENFORCE(group_ != nullptr, ValueError, "DistributedDataParallel: process group is null");
  LOCKSTEP_ENFORCE(opts.bucket_cap_mb > 0 && opts.first_bucket_mb > 0, ValueError,
                   "bucket_cap_mb and first_bucket_mb must be positive");
  registerModule("module", module_);
  verifySameModelEverywhere(*module_, *group_, "DistributedDataParallel");
  broadcastModel(*module_, *group_);
  ReducerOptions ro;
  ro.buckets.bucket_bytes = static_cast<size_t>(opts.bucket_cap_mb * 1024 * 1024);
  ro.buckets.first_bucket_bytes = static_cast<size_t>(opts.first_bucket_mb * 1024 * 1024);
  ro.find_unused_parameters = opts.find_unused_parameters;
  ro.gradient_as_bucket_view = opts.gradient_as_bucket_view;
  std::vector<Variable> params;
  std::vector<std::string> names;
  for (auto& [name, p] : module_->namedParameters()) {
    if (!p.requiresGrad()) continue;
    params.push_back(p);
    names.push_back(name);
  }
  reducer_ = std::make_unique<Reducer>(std::move(params), std::move(names), group_, ro);
  reducer_->setCommHook(makeCommHook(opts.comm_hook));
}

Variable DistributedDataParallel::forward(const Variable& x) {
  return forwardWith([&] { return module_->forward(x); });
}

Variable DistributedDataParallel::forwardWith(const std::function<Variable()>& run) {
  if (opts_.broadcast_buffers && group_->size() > 1) broadcastBuffers(*module_, *group_);
  const auto start = std::chrono::steady_clock::now();
  Variable out = run();
  if (isTraining() && autograd::isGradEnabled() && out.requiresGrad()) {
    reducer_->prepareForBackward(out, std::chrono::steady_clock::now() - start);
  }
  return out;
}

std::string formatTimings(const ReducerTimings& t) {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "iterations=%lld forward_compute_ms=%.3f backward_compute_ms=%.3f backward_comm_ms=%.3f "
                "backward_compute_comm_overlap_ms=%.3f backward_comm_wait_ms=%.3f",
                static_cast<long long>(t.iterations), t.forward_compute_ms, t.backward_compute_ms,
                t.backward_comm_ms, t.backward_compute_comm_overlap_ms, t.backward_comm_wait_ms);
  return buf;
}

}  // namespace lockstep::parallel
