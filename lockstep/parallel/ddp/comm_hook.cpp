#include "lockstep/parallel/ddp/comm_hook.h"

#include "lockstep/kernels/binary.h"
#include "lockstep/parallel/tensor_comm.h"

namespace lockstep::parallel {

void scaleInPlace(Tensor& t, double factor) {
  LOCKSTEP_CHECK(t.isDense(), t.describe());
  if (t.isCuda()) {
    // The element-wise kernel computes in f32 (f64 for f64) and rounds once, as the loops below.
    t.copyFrom(kernels::binaryScalar(kernels::BinaryOp::mul, t, factor));
    return;
  }
  const int64_t n = t.numel();
  if (t.dtype() == DType::f32) {
    float* p = t.data<float>();
    const float f = static_cast<float>(factor);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) p[i] *= f;
  } else if (t.dtype() == DType::f64) {
    double* p = t.data<double>();
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) p[i] *= factor;
  } else {
    Tensor f = t.to(DType::f32);
    scaleInPlace(f, factor);
    t.copyFrom(f);
  }
}

std::shared_ptr<comm::Work> AllreduceHook::launch(GradBucket& bucket) {
  const DType dt = bucket.buffer.dtype();
  if (dt == DType::f32 || dt == DType::f64) {
    return allreduce(*bucket.group, bucket.buffer, comm::ReduceOp::avg, bucket.last);
  }
  scaleInPlace(bucket.buffer, 1.0 / bucket.group->size());
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
    bucket.scratch = Tensor::empty(bucket.buffer.shape(), wire_, MemoryFormat::contiguous, bucket.buffer.device());
  }
  scaleInPlace(bucket.buffer, 1.0 / bucket.group->size());
  bucket.scratch.copyFrom(bucket.buffer);
  return allreduce(*bucket.group, bucket.scratch, comm::ReduceOp::sum, bucket.last);
}

void CompressHook::finish(GradBucket& bucket) { bucket.buffer.copyFrom(bucket.scratch); }

}  // namespace lockstep::parallel
