// kernels/accumulate.h on the CPU: the fused gradient accumulations are GPU kernels only.
#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

// The fused gradient accumulations have no CPU kernels (oneDNN's backward primitives take no
// accumulation): they say so and leave the held gradient alone, and the caller adds.
TEST(GradInto, cpu_tensors_are_left_to_the_caller) {
  Tensor held = randomTensor({2, 3, 5, 5}, DType::f32, 1);
  const Tensor before = held.clone();
  kernels::Conv2dParams p;
  p.padding = {1, 1};
  EXPECT_FALSE(kernels::conv2dBackwardDataInto(held, randomTensor({2, 4, 5, 5}, DType::f32, 2), held,
                                               randomTensor({4, 3, 3, 3}, DType::f32, 3), p));
  Tensor rows = randomTensor({6, 8}, DType::f32, 4);
  EXPECT_FALSE(kernels::linearBackwardDataInto(rows, randomTensor({6, 5}, DType::f32, 5),
                                               randomTensor({5, 8}, DType::f32, 6)));
  auto fwd = kernels::layerNormForward(rows, {8}, Tensor(), Tensor(), 1e-5);
  EXPECT_FALSE(
      kernels::layerNormBackwardInto(rows, rows, rows, fwd.mean, fwd.variance, {8}, Tensor(), Tensor(), 1e-5)
          .has_value());
  auto rms = kernels::rmsNormForward(rows, Tensor(), 1e-6);
  EXPECT_FALSE(kernels::rmsNormBackwardInto(rows, rows, rows, rms.rstd, Tensor()).has_value());
  EXPECT_TRUE(tensorsNear(held, before, 0, 0));
  // The shapes are still checked, naming the op.
  EXPECT_THROW(kernels::linearBackwardDataInto(rows, randomTensor({6, 5}, DType::f32, 5),
                                               randomTensor({4, 8}, DType::f32, 6)),
               ValueError);
}
