#include "lockstep/parallel/distributed_data_parallel.h"

#include <chrono>
#include <cstdio>
#include <sstream>

#include "lockstep/autograd/variable.h"
#include "lockstep/parallel/tensor_comm.h"

namespace lockstep::parallel {

std::unique_ptr<CommHook> makeCommHook(const std::string& name) {
  if (name == "allreduce") return std::make_unique<AllreduceHook>();
  if (name == "fp16_compress") return std::make_unique<CompressHook>(DType::f16);
  if (name == "bf16_compress") return std::make_unique<CompressHook>(DType::bf16);
  if (name == "noop") return std::make_unique<NoopHook>();
  throw ValueError(
      "unknown comm_hook '" + name +
      "'; use allreduce, fp16_compress, bf16_compress or noop (no synchronisation: a measurement only)");
}

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
  verifySameModelEverywhere();
  {
    autograd::NoGradGuard ng;
    for (auto& [name, p] : module_->namedParameters()) broadcast(*group_, p.tensor(), 0);
    for (auto& [name, b] : module_->namedBuffers()) broadcast(*group_, b, 0);
  }
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

void DistributedDataParallel::verifySameModelEverywhere() {
  std::ostringstream sig;
  for (auto& [name, p] : module_->namedParameters()) {
    sig << name << " " << dtypeName(p.dtype()) << " " << shapeToString(p.shape()) << "\n";
  }
  for (auto& [name, b] : module_->namedBuffers()) {
    sig << name << " (buffer) " << dtypeName(b.dtype()) << " " << shapeToString(b.shape()) << "\n";
  }
  std::vector<std::string> all = allgatherBytes(*group_, sig.str());
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  };
  std::vector<std::string> ref = lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    std::vector<std::string> other = lines(all[r]);
    size_t i = 0;
    while (i < ref.size() && i < other.size() && ref[i] == other[i]) ++i;
    std::string a = i < ref.size() ? ref[i] : "(no more parameters)";
    std::string b = i < other.size() ? other[i] : "(no more parameters)";
    std::ostringstream differing;
    for (size_t k = 1; k < all.size(); ++k) {
      if (all[k] != all[0]) differing << (differing.tellp() > 0 ? ", " : "") << k;
    }
    throw ValueError("DistributedDataParallel: the model differs across ranks. Parameter #" +
                     std::to_string(i) + ": rank 0 has '" + a + "', rank " + std::to_string(r) + " has '" +
                     b + "'. Ranks whose model differs from rank 0's: " + differing.str() +
                     ". Build the same model on every rank.");
  }
}

Variable DistributedDataParallel::forward(const Variable& x) {
  if (opts_.broadcast_buffers && group_->size() > 1) {
    autograd::NoGradGuard ng;
    for (auto& [name, b] : module_->namedBuffers()) broadcast(*group_, b, 0);
  }
  const auto start = std::chrono::steady_clock::now();
  Variable out = module_->forward(x);
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
