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

// dst += alpha * src with 16-bit dst: the f32 sum rounded once, bitwise what widening both whole,
// adding in f32 and rounding gives; dense (several blocks), a strided slice, a transposed source,
// an f32 source, alpha != 1.
TEST(AddInto, low_precision_destinations_add_in_f32_and_round_once) {
  for (DType dt : {DType::bf16, DType::f16}) {
    for (DType st : {dt, DType::f32}) {
      SCOPED_TRACE(std::string(dtypeName(dt)) + " += " + dtypeName(st));
      auto check = [&](Tensor dst, const Tensor& src, double alpha) {
        Tensor want = dst.to(DType::f32);
        const Tensor s32 = src.to(DType::f32);
        auto w = want.toVector<float>();
        const auto s = s32.contiguous().toVector<float>();
        const auto a = static_cast<float>(alpha);
        for (size_t i = 0; i < w.size(); ++i) w[i] += alpha == 1.0 ? s[i] : a * s[i];
        const Tensor expect = Tensor::fromVector<float>(w, dst.shape()).to(dt);
        kernels::addInto(dst, src, alpha);
        EXPECT_TRUE(tensorsNear(dst, expect, 0, 0));
      };
      check(randomTensor({3, 1500}, dt, 1), randomTensor({3, 1500}, st, 2), 1.0);
      check(randomTensor({3, 1500}, dt, 1), randomTensor({3, 1500}, st, 2), -0.375);
      // A slice of a larger tensor (a split piece's gradient): only its elements change.
      Tensor whole = randomTensor({4, 30, 96}, dt, 3);
      const Tensor before = whole.clone();
      check(whole.narrow(2, 32, 32), randomTensor({4, 30, 32}, st, 4), 1.0);
      EXPECT_TRUE(tensorsNear(whole.narrow(2, 0, 32), before.narrow(2, 0, 32), 0, 0));
      EXPECT_TRUE(tensorsNear(whole.narrow(2, 64, 32), before.narrow(2, 64, 32), 0, 0));
      // A transposed source: runs of stride != 1.
      check(randomTensor({40, 24}, dt, 5), randomTensor({24, 40}, st, 6).transpose(0, 1), 2.0);
    }
  }
}
