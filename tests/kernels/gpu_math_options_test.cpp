// The GPU math switches (kernels/gpu_math_options.h, torch.backends' meanings) as cuDNN and cuBLASLt
// obey them: convolutions repeat bitwise with deterministic algorithms (lockstep's default) for
// ResNet-like shapes in f32 and bf16, NCHW and channels_last; f32 without TF32 is full f32 (inputs
// 1 + 2^-12, which TF32 rounds to 1, so TF32 would be off by 2.4e-4 relative where f32 is exact or
// within a rounding or two); cudnn benchmarking and nondeterministic algorithms, when asked for,
// still compute the convolution. Runs with ctest -L gpu; skips without a GPU.
#include "lockstep/kernels/gpu_math_options.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>

#include "gpu_compare.h"
#include "lockstep/kernels/conv.h"
#include "lockstep/kernels/linear.h"

namespace lockstep {
namespace {

using kernels::Conv2dParams;
using kernels::GpuMathOptions;
using kernels::ScopedGpuMathOptions;
using testing::asF64;
using testing::gpu;
using testing::onGpu;
using testing::roundedInput;

struct Case {
  const char* name;
  Shape x, w;
  Conv2dParams p;
};

Conv2dParams params(int64_t stride, int64_t padding) {
  Conv2dParams p;
  p.stride = {stride, stride};
  p.padding = {padding, padding};
  return p;
}

// ResNet-18's convolution kinds: a 3x3 block conv, a strided 3x3 into the next stage, its 1x1
// strided shortcut, and a layer4 conv (where the replay-vs-eager drift of issue 35 showed).
std::vector<Case> resnetCases() {
  return {{"layer1 3x3", {16, 64, 32, 32}, {64, 64, 3, 3}, params(1, 1)},
          {"layer2 3x3 stride 2", {16, 64, 32, 32}, {128, 64, 3, 3}, params(2, 1)},
          {"layer2 1x1 shortcut", {16, 64, 32, 32}, {128, 64, 1, 1}, params(2, 0)},
          {"layer4 3x3", {16, 512, 4, 4}, {512, 512, 3, 3}, params(1, 1)}};
}

// Same shape and the same values bit for bit (f32 and bf16 convert to f64 exactly; NaN fails).
void expectSameBits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(shapeToString(a.shape()), shapeToString(b.shape())) << what;
  const std::vector<double> x = a.toVector<double>(), y = b.toVector<double>();
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) differ += x[i] != y[i];
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << x.size() << " elements differ between calls";
}

struct Results {
  Tensor y, gx, gw;
};

Results runConv(const Case& c, DType t, bool cl, uint64_t seed) {
  Tensor x = roundedInput(c.x, t, seed), w = roundedInput(c.w, t, seed + 1);
  Tensor gy = roundedInput(kernels::conv2dOutputShape(c.x, c.w, c.p), t, seed + 2);
  Tensor xg = onGpu(x, cl), gyg = onGpu(gy, cl), wg = gpu(w);
  Results r;
  r.y = kernels::conv2dForward(xg, wg, Tensor(), c.p);
  r.gx = kernels::conv2dBackwardData(gyg, xg, wg, c.p);
  r.gw = kernels::conv2dBackwardWeights(gyg, xg, c.w, false, c.p).weight;
  return r;
}

TEST(GpuMathOptions, conv_results_repeat_bitwise_with_deterministic_algorithms) {
  LOCKSTEP_REQUIRE_GPU();
  for (bool tf32 : {true, false}) {
    GpuMathOptions o;  // deterministic, no benchmark: lockstep's defaults
    o.cudnn_allow_tf32 = tf32;
    ScopedGpuMathOptions scope(o);
    for (DType t : {DType::f32, DType::bf16}) {
      if (t != DType::f32 && !tf32) continue;  // allow_tf32 is about f32 alone
      for (const Case& c : resnetCases()) {
        for (bool cl : {false, true}) {
          const std::string what = std::string(c.name) + (cl ? " channels_last " : " ") + dtypeName(t) +
                                   (tf32 ? "" : " without TF32");
          const Results first = runConv(c, t, cl, 11);
          for (int again = 0; again < 2; ++again) {
            const Results r = runConv(c, t, cl, 11);
            expectSameBits(r.y, first.y, what + ": forward");
            expectSameBits(r.gx, first.gx, what + ": data gradient");
            expectSameBits(r.gw, first.gw, what + ": weight gradient");
          }
        }
      }
    }
  }
}

// Every element of x (or w) 1 + 2^-12 and the other operand 1: each output is a count of terms
// times 1 + 2^-12, which f32 holds exactly for up to 2^11 terms (so do all partial sums) and TF32
// makes the bare count. The oracle is the f64 CPU convolution of the same values.
double f32Error(const Tensor& got, const Tensor& want) { return testing::closeness(got, want, 1e-6, 1.0); }

TEST(GpuMathOptions, f32_convolutions_without_tf32_are_full_f32) {
  LOCKSTEP_REQUIRE_GPU();
  const double v = 1.0 + 1.0 / 4096;  // exact in f32; TF32 (10-bit mantissa) rounds it to 1
  // Terms per output: forward 32 * 9 = 288, data 32 * 9, weight 4 * 16 * 16 = 1024 (all <= 2^11).
  const std::vector<Case> cases = {{"3x3", {4, 32, 16, 16}, {32, 32, 3, 3}, params(1, 1)},
                                   {"3x3 stride 2", {4, 32, 32, 32}, {32, 32, 3, 3}, params(2, 1)}};
  for (bool benchmark : {false, true}) {
    for (const Case& c : cases) {
      for (bool cl : {false, true}) {
        const std::string what =
            std::string(c.name) + (cl ? " channels_last" : "") + (benchmark ? " (cudnn benchmark)" : "");
        Tensor x = Tensor::full(c.x, v), w = Tensor::ones(c.w), ones_x = Tensor::ones(c.x);
        Tensor wv = Tensor::full(c.w, v);
        Tensor gy = Tensor::ones(kernels::conv2dOutputShape(c.x, c.w, c.p));
        const Tensor want_y = kernels::conv2dForward(asF64(x), asF64(w), Tensor(), c.p);
        const Tensor want_gx = kernels::conv2dBackwardData(asF64(gy), asF64(ones_x), asF64(wv), c.p);
        const Tensor want_gw = kernels::conv2dBackwardWeights(asF64(gy), asF64(x), c.w, false, c.p).weight;
        auto run = [&] {
          return std::array<Tensor, 3>{
              kernels::conv2dForward(onGpu(x, cl), gpu(w), Tensor(), c.p),
              kernels::conv2dBackwardData(onGpu(gy, cl), onGpu(ones_x, cl), gpu(wv), c.p),
              kernels::conv2dBackwardWeights(onGpu(gy, cl), onGpu(x, cl), c.w, false, c.p).weight};
        };
        GpuMathOptions o;
        o.cudnn_benchmark = benchmark;
        {
          // TF32 allowed first, so a choice kept from it would be found if the options were not
          // part of the choice's key.
          ScopedGpuMathOptions scope(o);
          auto r = run();
          EXPECT_LE(f32Error(r[0], want_y), 5e-4) << what << ": forward with TF32 allowed";
          EXPECT_LE(f32Error(r[1], want_gx), 5e-4) << what << ": data gradient with TF32 allowed";
          EXPECT_LE(f32Error(r[2], want_gw), 5e-4) << what << ": weight gradient with TF32 allowed";
          std::printf("%s: with TF32 allowed, relative errors %.3g %.3g %.3g (2.4e-4 where TF32 ran)\n",
                      what.c_str(), f32Error(r[0], want_y), f32Error(r[1], want_gx), f32Error(r[2], want_gw));
        }
        o.cudnn_allow_tf32 = false;
        ScopedGpuMathOptions scope(o);
        auto r = run();
        // f32 FMA kernels: exact for direct and GEMM-based algorithms, a few roundings for
        // Winograd or FFT ones; TF32 would be 2.4e-4 off.
        EXPECT_LE(f32Error(r[0], want_y), 1e-5) << what << ": forward without TF32";
        EXPECT_LE(f32Error(r[1], want_gx), 1e-5) << what << ": data gradient without TF32";
        EXPECT_LE(f32Error(r[2], want_gw), 1e-5) << what << ": weight gradient without TF32";
      }
    }
  }
}

TEST(GpuMathOptions, f32_matmuls_are_full_f32_unless_tf32_is_allowed) {
  LOCKSTEP_REQUIRE_GPU();
  const double v = 1.0 + 1.0 / 4096;
  // y = x @ w^T with K = 512 terms of v: 512 + 1/8 exactly in f32; 512 in TF32.
  Tensor x = Tensor::full({256, 512}, v), w = Tensor::ones({128, 512});
  const Tensor want = kernels::linearForward(asF64(x), asF64(w), Tensor());
  {
    ScopedGpuMathOptions scope(GpuMathOptions{});  // matmul_allow_tf32 false: PyTorch's default
    const Tensor y = kernels::linearForward(gpu(x), gpu(w), Tensor());
    EXPECT_EQ(testing::closeness(y, want, 1e-300, 0.0), 0.0) << "f32 GEMM of exact sums is exact";
    const Tensor m = kernels::matmul(gpu(x), gpu(w).transpose(0, 1));
    EXPECT_EQ(testing::closeness(m, want, 1e-300, 0.0), 0.0) << "matmul";
  }
  GpuMathOptions o;
  o.matmul_allow_tf32 = true;
  ScopedGpuMathOptions scope(o);
  const Tensor y = kernels::linearForward(gpu(x), gpu(w), Tensor());
  const double err = testing::closeness(y, want, 1e-6, 1.0);
  EXPECT_LE(err, 5e-4) << "TF32 GEMM";
  std::printf("matmul with TF32 allowed: relative error %.3g (2.4e-4 where TF32 ran)\n", err);
}

TEST(GpuMathOptions, nondeterministic_and_benchmarked_algorithms_still_compute_the_convolution) {
  LOCKSTEP_REQUIRE_GPU();
  const Case c = resnetCases()[1];
  for (bool deterministic : {false, true}) {
    for (bool benchmark : {false, true}) {
      GpuMathOptions o;
      o.cudnn_deterministic = deterministic;
      o.cudnn_benchmark = benchmark;
      o.cudnn_allow_tf32 = false;
      ScopedGpuMathOptions scope(o);
      const std::string what = std::string(c.name) +
                               (deterministic ? " deterministic" : " nondeterministic") +
                               (benchmark ? ", benchmark" : "");
      Tensor x = roundedInput(c.x, DType::f32, 21), w = roundedInput(c.w, DType::f32, 22);
      Tensor gy = roundedInput(kernels::conv2dOutputShape(c.x, c.w, c.p), DType::f32, 23);
      const Tensor want_gw = kernels::conv2dBackwardWeights(asF64(gy), asF64(x), c.w, false, c.p).weight;
      const Tensor want_gx = kernels::conv2dBackwardData(asF64(gy), asF64(x), asF64(w), c.p);
      for (bool cl : {false, true}) {
        const Tensor gw = kernels::conv2dBackwardWeights(onGpu(gy, cl), onGpu(x, cl), c.w, false, c.p).weight;
        const Tensor gx = kernels::conv2dBackwardData(onGpu(gy, cl), onGpu(x, cl), gpu(w), c.p);
        EXPECT_LE(testing::closeness(gw, want_gw, 1e-3, 1e-3), 1.0) << what << (cl ? " channels_last" : "");
        EXPECT_LE(testing::closeness(gx, want_gx, 1e-3, 1e-3), 1.0) << what << (cl ? " channels_last" : "");
        if (deterministic) {  // benchmarked or not, the chosen algorithm repeats bitwise
          expectSameBits(kernels::conv2dBackwardWeights(onGpu(gy, cl), onGpu(x, cl), c.w, false, c.p).weight,
                         gw, what + ": weight gradient");
        }
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
