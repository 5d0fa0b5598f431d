// linear and matmul on a GPU (cuBLASLt, kernels/cuda/blas.cpp) beyond gpu_ops_test.cpp's table
// (every dtype, odd sizes, broadcast batches, both gradients): cuBLASLt opened on first use, sliced
// and broadcast operands, empty sizes and the errors. Runs with ctest -L gpu; skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gpu_compare.h"
#include "lockstep/kernels/activation.h"
#include "lockstep/kernels/binary.h"
#include "lockstep/kernels/cuda/blas.h"
#include "lockstep/kernels/linear.h"
#include "lockstep/kernels/reduce.h"

namespace lockstep {
namespace {

using testing::closeness;
using testing::gpu;

using testing::OpClass;
using testing::tolFor;

// f32 at 1e-4 also shows that no TF32 (10-bit mantissa, errors ~1e-3 here) is used.

const auto& kDtypes = testing::kFloatDTypes;

Tensor input(const Shape& shape, DType dtype, uint64_t seed) {
  return testing::roundedInput(shape, dtype, seed);
}
Tensor f64(const Tensor& t) { return testing::asF64(t); }
void expectClose(const Tensor& got, const Tensor& want, DType t, const std::string& what) {
  testing::expectGpuClose(got, want, t, tolFor(t, OpClass::gemm), what);
}

// cuBLASLt is opened by the first GPU GEMM (kernels/cuda/cublaslt.cpp), from the toolkit or
// LD_LIBRARY_PATH; the CPU side of this (not loaded before) is Linear.cpu_gemms_do_not_load_cublaslt.
TEST(GpuLinear, the_first_gemm_opens_cublaslt) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor x = input({4, 8}, DType::f32, 1), w = input({3, 8}, DType::f32, 2);
  Tensor y = kernels::linearForward(gpu(x), gpu(w), Tensor());
  EXPECT_TRUE(y.isCuda());
  std::ifstream maps("/proc/self/maps");
  std::stringstream all;
  all << maps.rdbuf();
  EXPECT_NE(all.str().find("libcublasLt"), std::string::npos);
}

TEST(GpuLinear, takes_strided_operands_without_changing_the_result) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor xt = input({13, 7}, DType::f32, 7);  // x = xt^T: column-major [7, 13]
  Tensor wt = input({13, 5}, DType::f32, 8);  // w = wt^T: row-major weight's transpose
  Tensor big = input({7, 40}, DType::f32, 9);
  Tensor b = input({5}, DType::f32, 10);
  Tensor want = kernels::linearForward(f64(xt).transpose(0, 1), f64(wt).transpose(0, 1), f64(b));
  expectClose(kernels::linearForward(gpu(xt).transpose(0, 1), gpu(wt).transpose(0, 1), gpu(b)), want,
              DType::f32, "transposed x and weight");
  // A column slice: rows 40 apart (a leading dimension larger than the row).
  Tensor xs = big.narrow(1, 3, 13);
  expectClose(kernels::linearForward(gpu(big).narrow(1, 3, 13), gpu(wt).transpose(0, 1), gpu(b)),
              kernels::linearForward(f64(xs), f64(wt).transpose(0, 1), f64(b)), DType::f32, "sliced x");
  // A broadcast (stride 0) input is copied first.
  Tensor row = input({1, 13}, DType::f32, 11);
  expectClose(kernels::linearForward(gpu(row).expand({6, 13}), gpu(wt).transpose(0, 1), gpu(b)),
              kernels::linearForward(f64(row).expand({6, 13}), f64(wt).transpose(0, 1), f64(b)), DType::f32,
              "expanded x");
}

// GEMMs of 8 MiB and more with N or K not a multiple of 16 bytes (GPT-2's vocabulary: 50,257) run
// on zero-padded copies (kernels/cuda/blas.cpp): forward with bias, both gradients, x column-major
// and sliced (rows off the 16-byte boundary), against the f64 oracle. The 8 MiB is of the three
// matrices together, so f32 and bf16 both take the padded path at these sizes; K is small so that
// the oracle's f64 loops on the host stay a few seconds (at K 771 they took over 80 s).
// Sums of thousands of products, atol in units of the largest entry: on an H200 the bf16 weight
// gradient (2,048 rows summed) ended 1.7x the plain bound off at one entry. cuBLASLt may reduce
// split-K partial sums in bf16 (which PyTorch allows by default:
// allow_bf16_reduced_precision_reduction), so an entry near zero is off by a rounding of the partials.
void expectCloseAtScale(const Tensor& got, const Tensor& want, DType t, const std::string& what) {
  testing::Tol tol = tolFor(t, OpClass::gemm);
  double largest = 0;
  for (double v : want.toVector<double>()) largest = std::max(largest, std::abs(v));
  tol.atol *= std::max(1.0, largest);
  testing::expectGpuClose(got, want, t, tol, what);
}

TEST(GpuLinear, large_gemms_with_unaligned_sizes_run_padded_and_match_the_oracle) {
  LOCKSTEP_REQUIRE_GPU();
  const auto expectClose = expectCloseAtScale;
  const int64_t M = 2048, K = 77, N = 2047;
  for (DType t : {DType::f32, DType::bf16}) {
    const std::string what = std::string(dtypeName(t)) + " [2048, 77] x [77, 2047]";
    Tensor x = input({M, K}, t, 21), w = input({N, K}, t, 22), b = input({N}, t, 23),
           gy = input({M, N}, t, 24);
    expectClose(kernels::linearForward(gpu(x), gpu(w), gpu(b)),
                kernels::linearForward(f64(x), f64(w), f64(b)), t, what + " forward");
    expectClose(kernels::linearBackwardData(gpu(gy), gpu(w)), kernels::linearBackwardData(f64(gy), f64(w)), t,
                what + " data gradient");
    auto [gw, gb] = kernels::linearBackwardWeights(gpu(gy), gpu(x), true);
    auto [gw64, gb64] = kernels::linearBackwardWeights(f64(gy), f64(x), true);
    expectClose(gw, gw64, t, what + " weight gradient");
    expectClose(gb, gb64, t, what + " bias gradient");
    // x column-major (a transposed [K, M]) and x sliced one column in (rows at an odd offset).
    Tensor xt = input({K, M}, t, 25), wide = input({M, K + 1}, t, 26);
    expectClose(kernels::linearForward(gpu(xt).transpose(0, 1), gpu(w), gpu(b)),
                kernels::linearForward(f64(xt).transpose(0, 1), f64(w), f64(b)), t, what + " column-major x");
    expectClose(kernels::linearForward(gpu(wide).narrow(1, 1, K), gpu(w), Tensor()),
                kernels::linearForward(f64(wide).narrow(1, 1, K), f64(w), Tensor()), t, what + " sliced x");
  }
}

// The GELU in the GEMMs' epilogues (a transformer MLP's c_fc and GELU, and the backward through
// c_proj and the GELU): one cuBLASLt GEMM each on a GPU (the bias gradient from the epilogue too),
// against the composed ops in f64. GPT-2's shapes are these, larger; f32 at the GEMM tolerance also
// shows that the epilogue's GELU is the tanh form (the erf form differs by up to 5e-4).
TEST(GpuLinear, gelu_epilogues_match_the_composed_ops) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kDtypes) {
    if (t == DType::f64) continue;  // no f64 epilogues: kernels::linear* composes (the CPU test's path)
    const std::string what = dtypeName(t);
    Tensor x = input({2, 32, 48}, t, 31), w1 = input({96, 48}, t, 32), b1 = input({96}, t, 33);
    auto [y, z] = kernels::linearGeluTanhForward(gpu(x), gpu(w1), gpu(b1));
    Tensor z64 = kernels::linearForward(f64(x), f64(w1), f64(b1));
    expectClose(z, z64, t, what + " pre-activation");
    expectClose(y, kernels::geluTanhForward(z64), t, what + " gelu");
    auto [y_nb, z_nb] = kernels::linearGeluTanhForward(gpu(x), gpu(w1), Tensor());
    expectClose(y_nb, kernels::geluTanhForward(kernels::linearForward(f64(x), f64(w1), Tensor())), t,
                what + " gelu without bias");
    // Backward through a [40, 96] layer after it, from the GPU's own pre-activation.
    Tensor w2 = input({40, 96}, t, 34), gy = input({2, 32, 40}, t, 35);
    Tensor zh = z.to(Device::cpu());
    Tensor gz64 = kernels::geluTanhBackward(kernels::linearBackwardData(f64(gy), f64(w2)), f64(zh));
    Tensor gb64 = kernels::reduce(kernels::ReduceOp::sum, gz64.reshape({64, 96}), {0});
    // As the op chooses (LOCKSTEP_GELU_BACKWARD; by default a GEMM then the GELU's backward kernel,
    // the bias gradient left to the weight-gradient GEMM).
    auto [gz, gb] = kernels::linearBackwardDataGeluTanh(gpu(gy), gpu(w2), z, true);
    expectClose(gz, gz64, t, what + " gelu gradient");
    if (std::getenv("LOCKSTEP_GELU_BACKWARD") == nullptr) {
      EXPECT_FALSE(gb.defined()) << what << ": the default took the DGELU_BGRAD epilogue";
    }
    if (gb.defined()) {
      expectCloseAtScale(gb, gb64, t, what + " bias gradient");
    }
    auto [gz_nb, none] = kernels::linearBackwardDataGeluTanh(gpu(gy), gpu(w2), z, false);
    expectClose(gz_nb, gz64, t, what + " gelu gradient without bias");
    EXPECT_FALSE(none.defined());
    // cuBLASLt's DGELU_BGRAD epilogue itself: bf16/f16 (the autocast dtypes GPT trains in) must take
    // it; f32 may decline (nothing comes back).
    auto [gz_e, gb_e] = kernels::cuda::linearBackwardDataGeluTanh(gpu(gy), gpu(w2), z, true);
    if (t != DType::f32) {
      ASSERT_TRUE(gz_e.defined() && gb_e.defined()) << what << ": DGELU_BGRAD declined";
    }
    if (gz_e.defined()) {
      expectClose(gz_e, gz64, t, what + " gelu gradient (epilogue)");
      expectCloseAtScale(gb_e, gb64, t, what + " bias gradient (epilogue)");
    }
  }
}

// residual + x W^T + b with the residual read as cuBLASLt's C: each dtype with a residual of its own
// dtype, and bf16/f16 products into an f32 residual (autocast's stream), with and without a bias,
// against the f64 oracle; the fused GEMM must take these problems (GPT's and Llama's projections).
TEST(GpuLinear, residual_add_in_the_epilogue_matches_the_oracle) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kDtypes) {
    if (t == DType::f64) continue;  // no f64 epilogues: kernels::linearResidualForward composes
    std::vector<DType> residuals{t};
    if (t != DType::f32) residuals.push_back(DType::f32);
    for (DType r : residuals) {
      for (bool bias : {true, false}) {
        const std::string what =
            std::string(dtypeName(t)) + " into " + dtypeName(r) + (bias ? "" : ", no bias");
        Tensor x = input({2, 32, 48}, t, 41), w = input({64, 48}, t, 42),
               b = bias ? input({64}, t, 43) : Tensor();
        Tensor res = input({2, 32, 64}, r, 44);
        Tensor fused =
            kernels::cuda::linearResidualForward(gpu(x), gpu(w), bias ? gpu(b) : Tensor(), gpu(res));
        ASSERT_TRUE(fused.defined()) << what << ": the residual epilogue declined";
        EXPECT_EQ(fused.dtype(), r) << what;
        Tensor want = kernels::binary(kernels::BinaryOp::add, f64(res),
                                      kernels::linearForward(f64(x), f64(w), bias ? f64(b) : Tensor()));
        // Summed in f32 and rounded once to r.
        expectClose(fused, want, r, what);
        Tensor chosen = kernels::linearResidualForward(gpu(x), gpu(w), bias ? gpu(b) : Tensor(), gpu(res));
        EXPECT_LE(closeness(chosen, fused.to(Device::cpu()), 0, 0), 1.0)
            << what << ": the op took another path";
      }
    }
  }
  // A residual the epilogue cannot read (not contiguous): the op composes, same values.
  Tensor x = input({16, 32}, DType::bf16, 45), w = input({24, 32}, DType::bf16, 46);
  Tensor res = input({24, 16}, DType::f32, 47).transpose(0, 1);
  EXPECT_FALSE(kernels::cuda::linearResidualForward(gpu(x), gpu(w), Tensor(), gpu(res)).defined());
  Tensor y = kernels::linearResidualForward(gpu(x), gpu(w), Tensor(), gpu(res));
  expectClose(
      y, kernels::binary(kernels::BinaryOp::add, f64(res), kernels::linearForward(f64(x), f64(w), Tensor())),
      DType::bf16, "a transposed residual");
}

TEST(GpuLinear, empty_sizes_give_empty_or_bias_only_results) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor w = input({4, 0}, DType::f32, 12), b = input({4}, DType::f32, 13);
  Tensor y = kernels::linearForward(gpu(Tensor::zeros({3, 0})), gpu(w), gpu(b));
  EXPECT_LE(closeness(y, b.unsqueeze(0).expand({3, 4}).contiguous(), 0, 0), 1.0);  // in = 0: y = bias
  Tensor none =
      kernels::linearForward(gpu(Tensor::zeros({0, 5})), gpu(input({4, 5}, DType::f32, 14)), Tensor());
  EXPECT_EQ(shapeToString(none.shape()), "[0, 4]");
  auto [gw, gb] =
      kernels::linearBackwardWeights(gpu(Tensor::zeros({0, 4})), gpu(Tensor::zeros({0, 5})), true);
  EXPECT_EQ(gw.toVector<float>(), std::vector<float>(20, 0.0f));
  EXPECT_EQ(gb.toVector<float>(), std::vector<float>(4, 0.0f));
}

TEST(GpuLinear, mixed_devices_and_integer_dtypes_are_refused) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor x = input({3, 4}, DType::f32, 22), w = input({2, 4}, DType::f32, 23);
  try {
    kernels::linearForward(gpu(x), w, Tensor());
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("different devices"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::matmul(gpu(x), w.transpose(0, 1)), ValueError);
  Tensor xi = Tensor::zeros({3, 4}, DType::i32, Device::cuda(0)),
         wi = Tensor::zeros({2, 4}, DType::i32, Device::cuda(0));
  EXPECT_THROW(kernels::linearForward(xi, wi, Tensor()), NotSupportedError);
}

}  // namespace
}  // namespace lockstep
