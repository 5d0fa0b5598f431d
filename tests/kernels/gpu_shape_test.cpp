// CUDA concat against the CPU: any dim, odd sizes, strided and channels-last inputs, empty parts,
// every dtype; operands on two devices are an error. Skips without a GPU.
#include <gtest/gtest.h>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;

TEST(GpuConcat, matches_cpu_along_any_dim) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      std::vector<Tensor> xs;
      for (int i = 0; i < 3; ++i) {
        Shape s{2, 3, 5, 7};
        s[dim < 0 ? 3 : dim] = i == 1 ? 0 : 2 * i + 1;  // 1, 0, 5
        xs.push_back(hostRandom(s, t, 10 + i));
      }
      xs[2] = xs[2].toFormat(MemoryFormat::channels_last);
      std::vector<Tensor> ds;
      for (const Tensor& x : xs) ds.push_back(gpu(x));
      Tensor y = kernels::concat(ds, dim);
      EXPECT_TRUE(y.isContiguous());
      EXPECT_TRUE(gpuMatches(y, kernels::concat(xs, dim), lockstep::testing::kExact,
                             std::string(dtypeName(t)) + " dim " + std::to_string(dim)));
    }
  }
  Tensor a = Tensor::arange(6, DType::i64).view({2, 3});
  EXPECT_EQ(
      kernels::concat({gpu(a), gpu(a.transpose(0, 1).contiguous().view({2, 3}))}, 0).toVector<int64_t>(),
      kernels::concat({a, a.transpose(0, 1).contiguous().view({2, 3})}, 0).toVector<int64_t>());
  EXPECT_THROW(kernels::concat({gpu(a), a}, 0), ValueError);
  EXPECT_THROW(kernels::concat({a, gpu(a)}, 1), ValueError);
}
