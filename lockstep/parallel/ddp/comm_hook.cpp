#include "lockstep/parallel/ddp/comm_hook.h"

#include <array>
#include <functional>

#include "lockstep/kernels/scale.h"
#include "lockstep/parallel/tensor_comm.h"

namespace lockstep::parallel {

namespace {

struct HookEntry {
  const char* name;
  std::unique_ptr<CommHook> (*make)();
  const char* note;  // said after the name in the list of hooks, or empty
};

// The hooks by name: the one list makeCommHook, the config and its error messages read.
constexpr std::array<HookEntry, 4> kHooks{{
    {"allreduce", []() -> std::unique_ptr<CommHook> { return std::make_unique<AllreduceHook>(); }, ""},
    {"fp16_compress",
     []() -> std::unique_ptr<CommHook> { return std::make_unique<CompressHook>(DType::f16); }, ""},
    {"bf16_compress",
     []() -> std::unique_ptr<CommHook> { return std::make_unique<CompressHook>(DType::bf16); }, ""},
    {"noop", []() -> std::unique_ptr<CommHook> { return std::make_unique<NoopHook>(); },
     " (no synchronisation: a measurement only)"},
}};

}  // namespace

std::unique_ptr<CommHook> makeCommHook(const std::string& name) {
  for (const HookEntry& h : kHooks) {
    if (name == h.name) return h.make();
  }
  std::string known;
  for (size_t i = 0; i < kHooks.size(); ++i) {
    known += i == 0 ? "" : i + 1 == kHooks.size() ? " or " : ", ";
    known += std::string(kHooks[i].name) + kHooks[i].note;
  }
  throw ValueError("unknown comm_hook '" + name + "'; use " + known);
}

std::shared_ptr<comm::Work> AllreduceHook::launch(GradBucket& bucket) {
  const DType dt = bucket.buffer.dtype();
  if (dt == DType::f32 || dt == DType::f64) {
    return allreduce(*bucket.group, bucket.buffer, comm::ReduceOp::avg, bucket.last);
  }
  kernels::scaleInPlace(bucket.buffer, 1.0 / bucket.group->size());
  return allreduce(*bucket.group, bucket.buffer, comm::ReduceOp::sum, bucket.last);
}

std::shared_ptr<comm::Work> NoopHook::launch(GradBucket& bucket) {
  auto work = std::make_shared<comm::Work>("noop (bucket " + std::to_string(bucket.index) + ")");
  work->finish();
  return work;
}

std::shared_ptr<comm::Work> CompressHook::launch(GradBucket& bucket) {
  if (!bucket.scratch.defined() || bucket.scratch.numel() != bucket.buffer.numel() ||
      bucket.scratch.dtype() != wire_) {
    bucket.scratch =
        Tensor::empty(bucket.buffer.shape(), wire_, MemoryFormat::contiguous, bucket.buffer.device());
  }
  kernels::scaleInPlace(bucket.buffer, 1.0 / bucket.group->size());
  bucket.scratch.copyFrom(bucket.buffer);
  return allreduce(*bucket.group, bucket.scratch, comm::ReduceOp::sum, bucket.last);
}

void CompressHook::finish(GradBucket& bucket) { bucket.buffer.copyFrom(bucket.scratch); }

}  // namespace lockstep::parallel
