// The CUDA sum/mean reductions and sumToShape against the CPU kernels: every floating dtype and the
// integers, leading/trailing/middle/all/no dims, keepdim, long rows (the two-pass path), many
// columns (the column paths, one pass and split), non-contiguous inputs and empty tensors. Skips without a
// GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kFloatDTypes;
using lockstep::testing::Tol;

TEST(GpuReduce, takes_non_contiguous_inputs_and_zero_dim_results) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor x = hostRandom({6, 5, 4}, DType::f32, 3).permute({2, 0, 1});
  Tensor cl = hostRandom({2, 3, 4, 5}, DType::f32, 4).toFormat(MemoryFormat::channels_last);
  EXPECT_TRUE(gpuMatches(kernels::reduce(kernels::ReduceOp::sum, gpu(x), {1}),
                         kernels::reduce(kernels::ReduceOp::sum, x, {1})));
  EXPECT_TRUE(gpuMatches(kernels::reduce(kernels::ReduceOp::sum, gpu(cl), {0, 2, 3}),
                         kernels::reduce(kernels::ReduceOp::sum, cl, {0, 2, 3})));
  Tensor all = kernels::reduce(kernels::ReduceOp::mean, gpu(x), kernels::allDims(x));
  EXPECT_EQ(all.dim(), 0);
  EXPECT_TRUE(gpuMatches(all, kernels::reduce(kernels::ReduceOp::mean, x, kernels::allDims(x))));
}

TEST(GpuReduce, a_mean_of_nothing_is_nan) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    Tensor got = kernels::reduce(kernels::ReduceOp::mean, gpu(Tensor::empty({0, 4}, t)), {0});
    EXPECT_EQ(got.shape(), Shape{4});
    for (double v : got.toVector<double>()) EXPECT_TRUE(std::isnan(v)) << dtypeName(t);
  }
}

TEST(GpuReduce, integers_sum_exactly) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : {DType::i32, DType::i64}) {
    Tensor x = Tensor::arange(60, t).view({3, 4, 5});
    for (std::vector<int64_t> dims : {std::vector<int64_t>{0}, {1, 2}, {0, 1, 2}}) {
      EXPECT_EQ(kernels::reduce(kernels::ReduceOp::sum, gpu(x), dims).toVector<int64_t>(),
                kernels::reduce(kernels::ReduceOp::sum, x, dims).toVector<int64_t>());
    }
  }
}

TEST(GpuReduce, sum_to_shape_folds_broadcast_gradients) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor g = hostRandom({4, 3, 5, 7}, DType::f32, 5);
  for (const Shape& s : std::vector<Shape>{{3, 1, 7}, {7}, {1}, {4, 3, 5, 7}, {3, 5, 1}}) {
    Tensor got = kernels::sumToShape(gpu(g), s);
    Tol tol = lockstep::testing::tolFor(DType::f32);
    tol.atol *= std::sqrt(141.0);  // sums of up to 140 terms in another order
    EXPECT_TRUE(gpuMatches(got, kernels::sumToShape(g, s), tol, shapeToString(s)));
  }
  EXPECT_THROW(kernels::sumToShape(gpu(g), {2, 7}), ValueError);
}

TEST(GpuReduce, rejects_bad_dims) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor x = gpu(hostRandom({3, 4}, DType::f32, 1));
  EXPECT_THROW(kernels::reduce(kernels::ReduceOp::sum, x, {2}), ValueError);
  EXPECT_THROW(kernels::reduce(kernels::ReduceOp::sum, x, {1, -1}), ValueError);
}
