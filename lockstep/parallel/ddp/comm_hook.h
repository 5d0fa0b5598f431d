#pragma once
// Communication hooks: how DistributedDataParallel reduces one bucket of gradients (PyTorch's
// register_comm_hook). launch() starts the reduction asynchronously and returns its Work; finish()
// runs after the Work completed and must leave the averaged gradients in bucket.buffer.
// Hooks are called on the thread running backward, in bucket order; identical on every rank.
#include <functional>
#include <memory>
#include <string>

#include "lockstep/comm/process_group.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::parallel {

struct GradBucket {
  int index = 0;
  /// Flat, contiguous gradients of the bucket's parameters (the bucket's dtype).
  Tensor buffer;
  /// Scratch owned by the hook across iterations (e.g. the compressed copy), reused every step.
  Tensor scratch;
  comm::ProcessGroup* group = nullptr;
  /// The last bucket of this backward pass (GradBucket.is_last() in PyTorch): the reducer waits
  /// for every bucket right after launching it, so a hook may run it on the calling thread
  /// (comm::AllreduceOptions::defer) instead of handing it to the group's worker.
  bool last = false;
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::shared_ptr<comm::Work> launch(GradBucket& bucket) = 0;
  virtual void finish(GradBucket& bucket) {}
  virtual const char* name() const = 0;
};

/// The default: averages in place. f32 and f64 buckets are allreduced with ReduceOp::avg, which
/// backends finish in the pass that combines (shm) or in one pass after it; f16 and bf16 buckets
/// are divided by the world size first and then summed, so the sum cannot overflow.
class AllreduceHook : public CommHook {
 public:
  std::shared_ptr<comm::Work> launch(GradBucket& bucket) override;
  const char* name() const override { return "allreduce"; }
};

/// Halves the bytes on the wire: gradients are divided by the world size, cast to f16 (or bf16),
/// allreduced, then cast back (PyTorch's fp16_compress_hook / bf16_compress_hook).
class CompressHook : public CommHook {
 public:
  explicit CompressHook(DType wire) : wire_(wire) {}
  std::shared_ptr<comm::Work> launch(GradBucket& bucket) override;
  void finish(GradBucket& bucket) override;
  const char* name() const override { return wire_ == DType::f16 ? "fp16_compress" : "bf16_compress"; }

 private:
  DType wire_;
};

/// Leaves every rank's gradients as they are: no communication at all, so ranks train apart
/// (PyTorch's debugging noop_hook). Not training: a measurement of the headroom. What the same
/// job reaches with it is what the machine allows once gradient synchronisation costs nothing.
class NoopHook : public CommHook {
 public:
  std::shared_ptr<comm::Work> launch(GradBucket& bucket) override;
  const char* name() const override { return "noop"; }
};

/// A user's own hook from two functions (finish may be empty).
class FunctionHook : public CommHook {
 public:
  FunctionHook(std::function<std::shared_ptr<comm::Work>(GradBucket&)> launch,
               std::function<void(GradBucket&)> finish = {})
      : launch_(std::move(launch)), finish_(std::move(finish)) {}
  std::shared_ptr<comm::Work> launch(GradBucket& bucket) override { return launch_(bucket); }
  void finish(GradBucket& bucket) override {
    if (finish_) finish_(bucket);
  }
  const char* name() const override { return "user"; }

 private:
  std::function<std::shared_ptr<comm::Work>(GradBucket&)> launch_;
  std::function<void(GradBucket&)> finish_;
};

/// The comm hook named "allreduce", "fp16_compress", "bf16_compress" or "noop"; ValueError naming
/// them otherwise.
std::unique_ptr<CommHook> makeCommHook(const std::string& name);

}  // namespace lockstep::parallel
