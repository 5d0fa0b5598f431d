#include "lockstep/kernels/tables/batch_norm.h"

#include "common/check.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using kernels::BatchNormParams;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
struct BnCase {
  Shape x;
  bool affine;
  bool channels_last;
};
const std::vector<BnCase> kCases = {
    {{8, 16, 5, 5}, true, true}, {{1, 3, 7, 5}, true, false}, {{3, 4, 2, 3}, false, true}};

Tensor layout(const Tensor& t, bool channels_last) {
  return channels_last ? t.toFormat(MemoryFormat::channels_last) : t;
}
}  // namespace

TEST(BatchNorm2d, training_matches_reference_and_updates_running_stats) {
  uint64_t seed = 1;
  for (const auto& c : kCases) {
    const int64_t C = c.x[1];
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++, -2, 3), c.channels_last);
    Tensor w = c.affine ? randomTensor({C}, DType::f32, seed++) : Tensor();
    Tensor b = c.affine ? randomTensor({C}, DType::f32, seed++) : Tensor();
    Tensor rm = randomTensor({C}, DType::f32, seed++), rv = randomTensor({C}, DType::f32, seed++, 0.5, 1.5);
    Tensor rm0 = rm.clone(), rv0 = rv.clone();
    BatchNormParams p{true, 0.3, 1e-5};
    auto fast = kernels::batchNorm2dForward(x, w, b, rm, rv, p);
    auto ref = kernels::reference::kBatchNorm.batchNorm2dForward(x, w, b, Tensor(), Tensor(), Tensor(), p);
    EXPECT_TRUE(tensorsNear(fast.y, ref.y, 1e-4, 1e-4)) << shapeToString(c.x);
    EXPECT_EQ(fast.y.isChannelsLast(), x.isChannelsLast());
    EXPECT_TRUE(tensorsNear(fast.mean, ref.mean, 1e-5, 1e-5));
    EXPECT_TRUE(tensorsNear(fast.var, ref.var, 1e-5, 1e-5));
    // PyTorch's update: momentum blend with the unbiased batch variance.
    const double n = double(c.x[0] * c.x[2] * c.x[3]);
    auto m = ref.mean.toVector<double>(), v = ref.var.toVector<double>();
    auto m0 = rm0.toVector<double>(), v0 = rv0.toVector<double>();
    auto m1 = rm.toVector<double>(), v1 = rv.toVector<double>();
    for (int64_t i = 0; i < C; ++i) {
      EXPECT_NEAR(m1[i], 0.7 * m0[i] + 0.3 * m[i], 1e-5);
      EXPECT_NEAR(v1[i], 0.7 * v0[i] + 0.3 * v[i] * n / (n - 1), 1e-5);
    }
    Tensor gy = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    auto gf = kernels::batchNorm2dBackward(gy, x, w, c.affine, fast.mean, fast.var, p);
    auto gr = kernels::reference::kBatchNorm.batchNorm2dBackward(gy, x, w, c.affine, ref.mean, ref.var,
                                                                 Tensor(), false, p);
    EXPECT_TRUE(tensorsNear(gf.x, gr.x, 1e-4, 1e-3)) << shapeToString(c.x);
    EXPECT_EQ(gf.x.isChannelsLast(), x.isChannelsLast());
    EXPECT_EQ(gf.weight.defined(), c.affine);
    if (c.affine) {
      EXPECT_TRUE(tensorsNear(gf.weight, gr.weight, 1e-4, 1e-4));
      EXPECT_TRUE(tensorsNear(gf.bias, gr.bias, 1e-4, 1e-4));
    }
  }
}

TEST(BatchNorm2d, eval_uses_running_stats) {
  uint64_t seed = 30;
  for (const auto& c : kCases) {
    const int64_t C = c.x[1];
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    Tensor w = c.affine ? randomTensor({C}, DType::f32, seed++) : Tensor();
    Tensor b = c.affine ? randomTensor({C}, DType::f32, seed++) : Tensor();
    Tensor rm = randomTensor({C}, DType::f32, seed++), rv = randomTensor({C}, DType::f32, seed++, 0.5, 1.5);
    Tensor rm0 = rm.clone();
    BatchNormParams p{false, 0.1, 1e-3};
    auto fast = kernels::batchNorm2dForward(x, w, b, rm, rv, p);
    auto ref = kernels::reference::kBatchNorm.batchNorm2dForward(x, w, b, rm, rv, Tensor(), p);
    EXPECT_TRUE(tensorsNear(fast.y, ref.y, 1e-5, 1e-5));
    EXPECT_TRUE(tensorsNear(rm, rm0, 0.0));  // untouched
    Tensor gy = layout(randomTensor(c.x, DType::f32, seed++), c.channels_last);
    auto gf = kernels::batchNorm2dBackward(gy, x, w, c.affine, fast.mean, fast.var, p);
    auto gr = kernels::reference::kBatchNorm.batchNorm2dBackward(gy, x, w, c.affine, ref.mean, ref.var,
                                                                 Tensor(), false, p);
    EXPECT_TRUE(tensorsNear(gf.x, gr.x, 1e-5, 1e-4));
    if (c.affine) {
      EXPECT_TRUE(tensorsNear(gf.weight, gr.weight, 1e-4, 1e-4));
      EXPECT_TRUE(tensorsNear(gf.bias, gr.bias, 1e-4, 1e-4));
    }
  }
}

TEST(BatchNorm2d, rejects_mismatched_shapes) {
  Tensor x = Tensor::zeros({2, 3, 4, 4});
  EXPECT_THROW(kernels::batchNorm2dForward(x, Tensor::ones({4}), Tensor(), Tensor(), Tensor(), {}),
               ValueError);
  EXPECT_THROW(kernels::batchNorm2dForward(x, Tensor(), Tensor(), Tensor::zeros({2}), Tensor::ones({2}), {}),
               ValueError);
  EXPECT_THROW(
      kernels::batchNorm2dForward(Tensor::zeros({2, 3, 4}), Tensor(), Tensor(), Tensor(), Tensor(), {}),
      ValueError);
  // Eval without running statistics, and training on one value per channel.
  EXPECT_THROW(kernels::batchNorm2dForward(x, Tensor(), Tensor(), Tensor(), Tensor(), {false, 0.1, 1e-5}),
               ValueError);
  EXPECT_THROW(
      kernels::batchNorm2dForward(Tensor::zeros({1, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor(), {}),
      ValueError);
  try {
    kernels::batchNorm2dForward(x, Tensor::ones({4}), Tensor(), Tensor(), Tensor(), {});
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3, 4, 4]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos) << e.what();
  }
}

TEST(BatchNorm2d, weight_or_bias_alone_matches_reference) {
  Tensor x = randomTensor({4, 3, 3, 2}, DType::f32, 70).toFormat(MemoryFormat::channels_last);
  Tensor v = randomTensor({3}, DType::f32, 71), gy = randomTensor({4, 3, 3, 2}, DType::f32, 72);
  for (bool weight_only : {true, false}) {
    Tensor w = weight_only ? v : Tensor(), b = weight_only ? Tensor() : v;
    BatchNormParams p;
    auto fast = kernels::batchNorm2dForward(x, w, b, Tensor(), Tensor(), p);
    auto ref = kernels::reference::kBatchNorm.batchNorm2dForward(x, w, b, Tensor(), Tensor(), Tensor(), p);
    EXPECT_TRUE(tensorsNear(fast.y, ref.y, 1e-4, 1e-4));
    auto gf = kernels::batchNorm2dBackward(gy, x, w, b.defined(), fast.mean, fast.var, p);
    auto gr = kernels::reference::kBatchNorm.batchNorm2dBackward(gy, x, w, b.defined(), ref.mean, ref.var,
                                                                 Tensor(), false, p);
    EXPECT_TRUE(tensorsNear(gf.x, gr.x, 1e-4, 1e-3));
    EXPECT_EQ(gf.weight.defined(), weight_only);
    EXPECT_EQ(gf.bias.defined(), !weight_only);
    if (weight_only) {
      EXPECT_TRUE(tensorsNear(gf.weight, gr.weight, 1e-4, 1e-4));
    } else {
      EXPECT_TRUE(tensorsNear(gf.bias, gr.bias, 1e-4, 1e-4));
    }
  }
}

// Autocast's batch norm: a bf16/f16 x with f32 parameters and running statistics normalises the
// widened x and rounds y once; the parameters' gradients come in f32, the input's in x's dtype.
TEST(BatchNorm2d, low_precision_input_with_f32_parameters) {
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor x = randomTensor({4, 8, 3, 3}, DType::f32, 80).to(low).toFormat(MemoryFormat::channels_last);
    Tensor w = randomTensor({8}, DType::f32, 81), b = randomTensor({8}, DType::f32, 82);
    Tensor gy = randomTensor({4, 8, 3, 3}, DType::f32, 83).to(low);
    Tensor rm = Tensor::zeros({8}), rv = Tensor::ones({8}), rm32 = rm.clone(), rv32 = rv.clone();
    BatchNormParams p;
    auto got = kernels::batchNorm2dForward(x, w, b, rm, rv, p);
    auto want = kernels::batchNorm2dForward(x.to(DType::f32), w, b, rm32, rv32, p);
    EXPECT_EQ(got.y.dtype(), low);
    EXPECT_TRUE(got.y.isChannelsLast());
    EXPECT_EQ(got.y.to(DType::f32).toVector<float>(), want.y.to(low).to(DType::f32).toVector<float>());
    EXPECT_EQ(rm.toVector<float>(), rm32.toVector<float>());
    EXPECT_EQ(rv.toVector<float>(), rv32.toVector<float>());
    auto g = kernels::batchNorm2dBackward(gy, x, w, true, got.mean, got.var, p);
    auto g32 =
        kernels::batchNorm2dBackward(gy.to(DType::f32), x.to(DType::f32), w, true, want.mean, want.var, p);
    EXPECT_EQ(g.x.dtype(), low);
    EXPECT_EQ(g.weight.dtype(), DType::f32);
    EXPECT_EQ(g.bias.dtype(), DType::f32);
    EXPECT_EQ(g.weight.toVector<float>(), g32.weight.toVector<float>());
    EXPECT_EQ(g.x.to(DType::f32).toVector<float>(), g32.x.to(low).to(DType::f32).toVector<float>());
  }
  Tensor x = randomTensor({2, 3, 2, 2}, DType::f32, 84);
  EXPECT_THROW(
      kernels::batchNorm2dForward(x, Tensor::ones({3}, DType::bf16), Tensor(), Tensor(), Tensor(), {}),
      ValueError);
  EXPECT_THROW(kernels::batchNorm2dForward(x.to(DType::bf16), Tensor::ones({3}),
                                           Tensor::ones({3}, DType::bf16), Tensor(), Tensor(), {}),
               ValueError);
}

namespace {
// The backends' tables beside the entry point (which picks lockstep's cpu kernel for f32).
struct NamedTable {
  const char* name;
  const kernels::BatchNormKernels* table;
};
const NamedTable kCpuTables[] = {{"cpu", &kernels::cpu::kBatchNorm},
                                 {"onednn", &kernels::onednn::kBatchNorm}};
}  // namespace

// A ResNet block's tail, y = relu(bn(x) + residual), in the normalisation's passes: each CPU backend
// against the reference's loops, forward and backward (dL/dresidual is the relu's masked dL/dy), in
// both layouts, with dL/dy and the residual in the other layout, training and eval, and enough rows
// for the cpu kernel's blocks of sums.
TEST(BatchNorm2d, residual_and_relu_fused_match_the_reference) {
  struct Case {
    Shape x;
    bool channels_last, other_layout, training, relu, residual;
  };
  const std::vector<Case> cases = {
      {{4, 64, 20, 20}, true, false, true, true, true}, {{4, 64, 20, 20}, true, true, true, true, false},
      {{2, 16, 7, 9}, false, false, true, true, true},  {{2, 16, 7, 9}, false, true, true, false, true},
      {{3, 32, 5, 5}, true, false, false, true, true},  {{3, 32, 5, 5}, false, false, false, true, false}};
  uint64_t seed = 100;
  for (const auto& c : cases) {
    const int64_t C = c.x[1];
    const std::string what = shapeToString(c.x) + (c.channels_last ? " channels_last" : " nchw") +
                             (c.training ? " training" : " eval") + (c.relu ? " relu" : "") +
                             (c.residual ? " residual" : "");
    Tensor x = layout(randomTensor(c.x, DType::f32, seed++, -2, 3), c.channels_last);
    Tensor w = randomTensor({C}, DType::f32, seed++), b = randomTensor({C}, DType::f32, seed++);
    Tensor rm = randomTensor({C}, DType::f32, seed++), rv = randomTensor({C}, DType::f32, seed++, 0.5, 1.5);
    const bool other = c.channels_last != c.other_layout;
    Tensor res = c.residual ? layout(randomTensor(c.x, DType::f32, seed++), other) : Tensor();
    Tensor gy = layout(randomTensor(c.x, DType::f32, seed++), other);
    BatchNormParams p{c.training, 0.1, 1e-5};
    p.relu = c.relu;
    auto ref = kernels::reference::kBatchNorm.batchNorm2dForward(x, w, b, rm, rv, res, p);
    auto gref = kernels::reference::kBatchNorm.batchNorm2dBackward(gy, x, w, true, ref.mean, ref.var, ref.y,
                                                                   c.residual, p);
    for (const auto& [name, table] : kCpuTables) {
      auto got = table->batchNorm2dForward(x, w, b, rm, rv, res, p);
      EXPECT_TRUE(tensorsNear(got.y, ref.y, 1e-5, 1e-5)) << name << " " << what;
      EXPECT_EQ(got.y.isChannelsLast(), x.isChannelsLast()) << name << " " << what;
      EXPECT_TRUE(tensorsNear(got.mean, ref.mean, 1e-6, 1e-6)) << name << " " << what;
      EXPECT_TRUE(tensorsNear(got.var, ref.var, 1e-6, 1e-6)) << name << " " << what;
      // The backward takes the kernel's own y (its relu mask), as autograd saves it.
      auto g = table->batchNorm2dBackward(gy, x, w, true, got.mean, got.var, got.y, c.residual, p);
      EXPECT_TRUE(tensorsNear(g.x, gref.x, 1e-5, 1e-4)) << name << " " << what;
      EXPECT_TRUE(tensorsNear(g.weight, gref.weight, 1e-4, 1e-5)) << name << " " << what;
      EXPECT_TRUE(tensorsNear(g.bias, gref.bias, 1e-4, 1e-5)) << name << " " << what;
      EXPECT_EQ(g.residual.defined(), c.residual) << name << " " << what;
      if (c.residual) {
        EXPECT_TRUE(tensorsNear(g.residual, gref.residual, 0.0)) << name << " " << what;
      }
    }
    // The entry point on the same inputs (the running statistics are updated there).
    Tensor rm1 = rm.clone(), rv1 = rv.clone();
    auto entry = kernels::batchNorm2dForward(x, w, b, rm1, rv1, p, res);
    EXPECT_TRUE(tensorsNear(entry.y, ref.y, 1e-5, 1e-5)) << what;
    auto ge = kernels::batchNorm2dBackward(gy, x, w, true, entry.mean, entry.var, p, entry.y, c.residual);
    EXPECT_TRUE(tensorsNear(ge.x, gref.x, 1e-5, 1e-4)) << what;
  }
}

// The cpu kernel's sums go over blocks fixed by the shape: the same bits with any number of threads.
// Its variance, E[x^2] - E[x]^2 in f64, holds where the mean dwarfs the spread.
TEST(BatchNorm2d, cpu_kernel_same_bits_with_any_threads_and_exact_far_from_zero) {
  Tensor x =
      randomTensor({8, 64, 14, 14}, DType::f32, 200, 999.0, 1001.0).toFormat(MemoryFormat::channels_last);
  Tensor w = randomTensor({64}, DType::f32, 201), b = randomTensor({64}, DType::f32, 202);
  Tensor res = randomTensor({8, 64, 14, 14}, DType::f32, 203).toFormat(MemoryFormat::channels_last);
  Tensor gy = randomTensor({8, 64, 14, 14}, DType::f32, 204).toFormat(MemoryFormat::channels_last);
  BatchNormParams p;
  p.relu = true;
  const int before = kernels::numThreads();
  std::vector<std::vector<float>> outs;
  for (int threads : {1, 2, 3}) {
    kernels::setNumThreads(threads);
    auto r = kernels::cpu::kBatchNorm.batchNorm2dForward(x, w, b, Tensor(), Tensor(), res, p);
    auto g = kernels::cpu::kBatchNorm.batchNorm2dBackward(gy, x, w, true, r.mean, r.var, r.y, true, p);
    std::vector<float> all;
    for (const Tensor& t : {r.y, r.mean, r.var, g.x, g.weight, g.bias, g.residual}) {
      auto v = t.toVector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    outs.push_back(std::move(all));
  }
  kernels::setNumThreads(before);
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
  auto ref = kernels::reference::kBatchNorm.batchNorm2dForward(x, w, b, Tensor(), Tensor(), res, p);
  auto got = kernels::cpu::kBatchNorm.batchNorm2dForward(x, w, b, Tensor(), Tensor(), res, p);
  // var ~ 1/3 around a mean of 1000: f32 sums of squares would lose it entirely.
  EXPECT_TRUE(tensorsNear(got.var, ref.var, 1e-6, 1e-5));
  EXPECT_TRUE(tensorsNear(got.y, ref.y, 1e-4, 1e-4));
}
