// Every kernel the autocast policy sends bf16 or f16 tensors to, against the same op in f32 on the
// same (rounded) inputs. Native low-precision kernels accumulate in f32 and round their outputs;
// the emulation rounds an f32 result. Either way a result may differ from the f32 reference by the
// output's rounding (2^-8 relative for bf16, 2^-11 for f16) plus a little accumulation-order noise:
// the tolerances below are twice the rounding, with an absolute floor for values near zero.
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
using Op = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Case {
  const char* name;
  std::vector<Shape> inputs;
  Op op;
};

Tensor nhwc(const Tensor& t) { return t.toFormat(MemoryFormat::channels_last); }

std::vector<Case> cases() {
  kernels::Conv2dParams conv;
  kernels::Conv2dParams conv_relu;
  conv_relu.fuse_relu = true;
  kernels::Pool2dParams pool;
  std::vector<Case> cs;
  cs.push_back({"conv2d forward", {{4, 8, 10, 10}, {16, 8, 3, 3}, {16}}, [=](const std::vector<Tensor>& t) {
                  return std::vector<Tensor>{kernels::conv2dForward(nhwc(t[0]), t[1], t[2], conv)};
                }});
  cs.push_back(
      {"conv2d forward + relu", {{4, 8, 10, 10}, {16, 8, 3, 3}, {16}}, [=](const std::vector<Tensor>& t) {
         return std::vector<Tensor>{kernels::conv2dForward(nhwc(t[0]), t[1], t[2], conv_relu)};
       }});
  cs.push_back({"conv2d backward data",
                {{4, 16, 8, 8}, {4, 8, 10, 10}, {16, 8, 3, 3}},
                [=](const std::vector<Tensor>& t) {
                  return std::vector<Tensor>{kernels::conv2dBackwardData(nhwc(t[0]), nhwc(t[1]), t[2], conv)};
                }});
  cs.push_back(
      {"conv2d backward weights", {{4, 16, 8, 8}, {4, 8, 10, 10}}, [=](const std::vector<Tensor>& t) {
         auto g = kernels::conv2dBackwardWeights(nhwc(t[0]), nhwc(t[1]), {16, 8, 3, 3}, true, conv);
         return std::vector<Tensor>{g.weight, g.bias};
       }});
  cs.push_back({"linear forward", {{12, 40}, {24, 40}, {24}}, [](const std::vector<Tensor>& t) {
                  return std::vector<Tensor>{kernels::linearForward(t[0], t[1], t[2])};
                }});
  cs.push_back({"linear backward data", {{12, 24}, {24, 40}}, [](const std::vector<Tensor>& t) {
                  return std::vector<Tensor>{kernels::linearBackwardData(t[0], t[1])};
                }});
  cs.push_back({"linear backward weights", {{12, 24}, {12, 40}}, [](const std::vector<Tensor>& t) {
                  auto [gw, gb] = kernels::linearBackwardWeights(t[0], t[1], true);
                  return std::vector<Tensor>{gw, gb};
                }});
  cs.push_back({"batched matmul", {{3, 5, 16}, {3, 16, 7}}, [](const std::vector<Tensor>& t) {
                  return std::vector<Tensor>{kernels::matmul(t[0], t[1])};
                }});
  cs.push_back({"matmul backward", {{3, 5, 7}, {3, 5, 16}, {3, 16, 7}}, [](const std::vector<Tensor>& t) {
                  auto [ga, gb] = kernels::matmulBackward(t[0], t[1], t[2], true, true);
                  return std::vector<Tensor>{ga, gb};
                }});
  cs.push_back({"relu forward and backward", {{4, 8, 6, 6}, {4, 8, 6, 6}}, [](const std::vector<Tensor>& t) {
                  Tensor y = kernels::reluForward(nhwc(t[0]));
                  return std::vector<Tensor>{y, kernels::reluBackward(nhwc(t[1]), y)};
                }});
  cs.push_back({"gelu forward and backward", {{6, 32}, {6, 32}}, [](const std::vector<Tensor>& t) {
                  return std::vector<Tensor>{kernels::geluForward(t[0]), kernels::geluBackward(t[1], t[0])};
                }});
  cs.push_back(
      {"max_pool2d forward and backward", {{4, 8, 6, 6}, {4, 8, 3, 3}}, [=](const std::vector<Tensor>& t) {
         Tensor x = nhwc(t[0]);
         auto r = kernels::maxPool2dForward(x, pool, true);
         return std::vector<Tensor>{r.y, kernels::maxPool2dBackward(nhwc(t[1]), x, r.workspace, pool)};
       }});
  cs.push_back(
      {"avg_pool2d forward and backward", {{4, 8, 6, 6}, {4, 8, 3, 3}}, [=](const std::vector<Tensor>& t) {
         Tensor x = nhwc(t[0]);
         return std::vector<Tensor>{kernels::avgPool2dForward(x, pool),
                                    kernels::avgPool2dBackward(nhwc(t[1]), x, pool)};
       }});
  cs.push_back({"add and mul (broadcast)", {{4, 8, 5}, {8, 1}}, [](const std::vector<Tensor>& t) {
                  return std::vector<Tensor>{kernels::binary(kernels::BinaryOp::add, t[0], t[1]),
                                             kernels::binary(kernels::BinaryOp::mul, t[0], t[1])};
                }});
  cs.push_back({"softmax forward and backward", {{6, 10}, {6, 10}}, [](const std::vector<Tensor>& t) {
                  Tensor y = kernels::softmaxForward(t[0], 1);
                  return std::vector<Tensor>{y, kernels::softmaxBackward(t[1], y, 1)};
                }});
  cs.push_back({"sum", {{6, 10, 4}}, [](const std::vector<Tensor>& t) {
                  return std::vector<Tensor>{kernels::reduce(kernels::ReduceOp::sum, t[0], {1})};
                }});
  cs.push_back(
      {"layer_norm forward and backward", {{6, 16}, {16}, {16}, {6, 16}}, [](const std::vector<Tensor>& t) {
         auto out = kernels::layerNormForward(t[0], {16}, t[1], t[2], 1e-5);
         auto g = kernels::layerNormBackward(t[3], t[0], out.mean, out.variance, {16}, t[1], t[2], 1e-5);
         return std::vector<Tensor>{out.y, g.gx, g.gweight, g.gbias};
       }});
  cs.push_back({"attention forward and backward (causal, GQA)",
                {{2, 4, 19, 8}, {2, 2, 19, 8}, {2, 2, 19, 8}, {2, 4, 19, 8}},
                [](const std::vector<Tensor>& t) {
                  kernels::AttentionParams p;
                  p.causal = true;
                  p.scale = 0.35;
                  auto f = kernels::attentionForward(t[0], t[1], t[2], p);
                  auto g = kernels::attentionBackward(t[3], t[0], t[1], t[2], f.out, f.lse, p);
                  return std::vector<Tensor>{f.out, g.gq, g.gk, g.gv};
                }});
  cs.push_back({"swiglu forward and backward", {{6, 20}, {6, 20}, {6, 20}}, [](const std::vector<Tensor>& t) {
                  auto [ga, gb] = kernels::swigluBackward(t[2], t[0], t[1]);
                  return std::vector<Tensor>{kernels::swigluForward(t[0], t[1]), ga, gb};
                }});
  cs.push_back({"rotary forward", {{2, 3, 5, 8}, {5, 4}, {5, 4}}, [](const std::vector<Tensor>& t) {
                  return std::vector<Tensor>{kernels::rotaryForward(t[0], t[1], t[2])};
                }});
  cs.push_back({"gelu(tanh) and silu forward", {{6, 20}}, [](const std::vector<Tensor>& t) {
                  return std::vector<Tensor>{kernels::geluTanhForward(t[0]), kernels::siluForward(t[0])};
                }});
  return cs;
}

void checkAgainstF32(DType low, double rtol, double atol) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::string(c.name) + " in " + dtypeName(low));
    std::vector<Tensor> in_low, in_f32;
    uint64_t seed = 7;
    for (const Shape& s : c.inputs) {
      Tensor t = randomTensor(s, DType::f32, seed++).to(low);
      in_low.push_back(t);
      in_f32.push_back(t.to(DType::f32));  // the same values, exactly
    }
    std::vector<Tensor> got = c.op(in_low), want = c.op(in_f32);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].dtype(), low) << "output " << i;
      EXPECT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
      // The reduction-heavy outputs (weight gradients sum over the batch) get a larger floor.
      double scale = 1.0;
      for (double v : want[i].toVector<double>()) scale = std::max(scale, std::abs(v));
      EXPECT_TRUE(tensorsNear(got[i].to(DType::f32), want[i], atol * scale, rtol)) << "output " << i;
    }
  }
}
}  // namespace

TEST(LowPrecisionKernels, bf16_ops_match_f32_on_the_same_inputs) {
  std::cout << "[ path ] " << kernels::precisionPath(DType::bf16) << "\n";
  checkAgainstF32(DType::bf16, 2.0 / 256, 2.0 / 256);
}

TEST(LowPrecisionKernels, f16_ops_match_f32_on_the_same_inputs) {
  std::cout << "[ path ] " << kernels::precisionPath(DType::f16) << "\n";
  checkAgainstF32(DType::f16, 2.0 / 2048, 2.0 / 2048);
}

TEST(LowPrecisionKernels, path_names_the_isa_and_whether_native) {
  const std::string path = kernels::precisionPath(DType::bf16);
  if (kernels::backendFor(DType::bf16) == kernels::Backend::onednn &&
      !std::getenv("LOCKSTEP_LOW_PRECISION")) {
    EXPECT_NE(path.find(kernels::kernelIsa()), std::string::npos) << path;
  }
  EXPECT_NE(path.find(kernels::computesNatively(DType::bf16) ? "native" : "emulated"), std::string::npos)
      << path;
  EXPECT_TRUE(kernels::computesNatively(DType::f32));
}

TEST(LowPrecisionKernels, dropout_keeps_low_precision_and_draws_as_f32) {
  Tensor x = randomTensor({64, 32}, DType::f32, 3);
  Generator g1(11), g2(11);
  auto [y16, m16] = kernels::dropoutForward(x.to(DType::bf16), 0.25, g1);
  auto [y32, m32] = kernels::dropoutForward(x.to(DType::bf16).to(DType::f32), 0.25, g2);
  EXPECT_EQ(y16.dtype(), DType::bf16);
  EXPECT_EQ(m16.toVector<int>(), m32.toVector<int>());
  EXPECT_TRUE(tensorsNear(y16.to(DType::f32), y32, 0, 2.0 / 256));
  Tensor gx = kernels::dropoutBackward(y16, m16, 0.25);
  EXPECT_EQ(gx.dtype(), DType::bf16);
}
