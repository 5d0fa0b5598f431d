#include "lockstep/data/transforms/transform.h"

#include "lockstep/tensor/generator.h"

namespace lockstep::data {

std::array<uint32_t, 4> transformRandom(const TransformContext& ctx) {
  const uint64_t key = ctx.seed ^ ((static_cast<uint64_t>(ctx.slot) + 1) * 0x9E3779B97F4A7C15ull);
  return philox4x32(static_cast<uint64_t>(ctx.index), ctx.epoch, key);
}

void Transform::checkInput(const Tensor& input, int64_t dims) const {
  LOCKSTEP_ENFORCE(input.defined() && input.dtype() == DType::f32 && input.isContiguous(), ValueError, name(),
                   ": needs a contiguous f32 input, got ", input.defined() ? input.describe() : "undefined");
  LOCKSTEP_ENFORCE(dims == 0 ? input.dim() >= 1 : input.dim() == dims, ValueError, name(), ": needs a ",
                   dims == 0 ? "[C, ...]" : "[C, H, W]", " input, got ", input.describe());
}

}  // namespace lockstep::data
