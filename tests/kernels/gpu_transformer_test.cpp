// The CUDA transformer kernels (layer norm, embedding, RMSNorm, SwiGLU, rotary, attention) against
// the CPU kernels in every floating dtype: forward and backward, strided inputs, GQA, causal masks,
// the attention's Philox dropout decisions, and the errors a GPU must raise. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu_compare.h"
#include "lockstep/kernels.h"

using namespace lockstep;
using lockstep::testing::f64;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kFloatDTypes;
using lockstep::testing::oracle;
using lockstep::testing::Tol;
using lockstep::testing::tolFor;

namespace {

// One draw, seen as the same view on the host and on the GPU (the view is taken on each device, so
// the GPU operand really is strided when `transposed`: dims 0 and 1 of `shape` swapped).
struct Views {
  Tensor host, dev;
};
Views drawn(const Shape& shape, DType t, uint64_t seed, bool transposed = false, double low = -1.0,
            double high = 1.0) {
  Tensor base = hostRandom(shape, t, seed, low, high), base_dev = gpu(base);
  if (!transposed) return {base, base_dev};
  return {base.transpose(0, 1), base_dev.transpose(0, 1)};
}

std::string name(DType t, const Shape& shape) {
  return std::string(dtypeName(t)) + " " + shapeToString(shape);
}
DType statDType(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

double maxAbs(const Tensor& t) {
  double m = 0;
  for (double x : t.toVector<double>()) m = std::max(m, std::abs(x));
  return m;
}

// Row and column reductions (norm statistics and gradients, the embedding's scatter-add) add in
// another order than the CPU: f32 and f64 get a margin for that. bf16/f16 compute in f32 on both
// sides and round once, so tolFor's rounding margin stands.
Tol accumTol(DType t) {
  switch (t) {
    case DType::f64:
      return {1e-11, 1e-10};
    case DType::f32:
      return {1e-5, 1e-4};
    default:
      return tolFor(t);
  }
}

// Attention sums D products per score and S (T * H / Hkv for dk, dv) terms per output in another
// order than the CPU's 64 x 64 f32 blocks, and bf16/f16 tensor-core products may round P and dS to
// the input dtype: twice tolFor's margin for bf16/f16, an order-of-summation margin for f32/f64.
Tol attentionTol(DType t) {
  switch (t) {
    case DType::f64:
      return {1e-10, 1e-9};
    case DType::f32:
      return {2e-5, 1e-4};
    case DType::bf16:
      return {2e-2, 3.2e-2};
    default:
      return {4e-3, 8e-3};
  }
}
// Gradients grow with S and with the query heads sharing a kv head: atol in units of the largest.
Tol gradTol(DType t, const Tensor& want) {
  Tol tol = attentionTol(t);
  tol.atol *= std::max(1.0, maxAbs(want));
  return tol;
}
// The logsumexp is f32 (f64) for every input dtype: scores of the same rounded inputs.
Tol lseTol(DType t) { return t == DType::f64 ? Tol{1e-10, 1e-10} : Tol{2e-5, 2e-5}; }

// ---- layer norm and RMSNorm cases ----

struct NormCase {
  Shape shape;       // of the draw
  Shape normalized;  // trailing dims of x normalised (layer norm; RMSNorm takes the last)
  bool transposed;   // x is the draw's transpose(0, 1): rows not contiguous
};
// Short rows (a warp), many rows, a block-wide row, 1-D x, a strided x.
const NormCase kNormCases[] = {{{4, 7}, {7}, false},     {{2, 3, 5}, {3, 5}, false},
                               {{256, 32}, {32}, false}, {{3, 4096}, {4096}, false},
                               {{9}, {9}, false},        {{64, 6}, {64}, true}};

struct Affine {
  bool weight, bias;
};
const Affine kAffine[] = {{true, true}, {false, false}, {true, false}, {false, true}};

std::string normName(DType t, const NormCase& c, const Affine& a) {
  return name(t, c.shape) + (c.transposed ? " transposed" : "") + " over " + shapeToString(c.normalized) +
         (a.weight ? " weight" : "") + (a.bias ? " bias" : "");
}
std::string rmsName(DType t, const NormCase& c, bool with_weight) {
  return name(t, c.shape) + (c.transposed ? " transposed" : "") + (with_weight ? " weight" : "");
}

// ---- attention cases ----

struct AttnCase {
  int64_t b, h, hkv, t, s, d;
};
// T past a 64-row block, GQA (H 4, Hkv 2), T < S and T > S, one query, D in {8, 64, 100, 128}.
const AttnCase kAttnCases[] = {{2, 2, 2, 37, 37, 8},
                               {1, 4, 2, 70, 70, 64},
                               {2, 2, 2, 33, 65, 100},
                               {1, 4, 2, 129, 50, 128},
                               {1, 4, 2, 1, 70, 64}};

std::string attnName(DType t, const AttnCase& c, const kernels::AttentionParams& p) {
  return std::string(dtypeName(t)) + " B=" + std::to_string(c.b) + " H=" + std::to_string(c.h) +
         " Hkv=" + std::to_string(c.hkv) + " T=" + std::to_string(c.t) + " S=" + std::to_string(c.s) +
         " D=" + std::to_string(c.d) + (p.causal ? " causal" : "") + " p=" + std::to_string(p.dropout_p) +
         " offset=" + std::to_string(p.offset);
}

kernels::AttentionParams attnParams(const AttnCase& c, bool causal, double dropout = 0.0,
                                    uint64_t offset = 77) {
  kernels::AttentionParams p;
  p.causal = causal;
  p.dropout_p = dropout;
  p.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  p.seed = 1234;
  p.offset = offset;
  return p;
}

struct Qkv {
  Tensor q, k, v;
};
Qkv hostQkv(const AttnCase& c, DType t) {
  return {hostRandom({c.b, c.h, c.t, c.d}, t, 1, -2.0, 2.0),
          hostRandom({c.b, c.hkv, c.s, c.d}, t, 2, -2.0, 2.0), hostRandom({c.b, c.hkv, c.s, c.d}, t, 3)};
}
Qkv onGpu(const Qkv& x) { return {gpu(x.q), gpu(x.k), gpu(x.v)}; }

void expectForwardMatches(const kernels::AttentionOutput& got, const kernels::AttentionOutput& want, DType t,
                          const std::string& what) {
  EXPECT_TRUE(gpuMatches(got.out, want.out, attentionTol(t), what + " out"));
  EXPECT_TRUE(got.out.isContiguous()) << what;
  EXPECT_TRUE(gpuMatches(got.lse, want.lse, lseTol(t), what + " lse"));
}

// Backward on both devices, each from its own forward's out and lse.
void expectGradsMatch(const Qkv& host, const Qkv& dev, const kernels::AttentionOutput& fwd_host,
                      const kernels::AttentionOutput& fwd_dev, const kernels::AttentionParams& p,
                      const std::string& what) {
  const DType t = host.q.dtype();
  Tensor gout = hostRandom(host.q.shape(), t, 4);
  auto want = kernels::attentionBackward(gout, host.q, host.k, host.v, fwd_host.out, fwd_host.lse, p);
  auto got = kernels::attentionBackward(gpu(gout), dev.q, dev.k, dev.v, fwd_dev.out, fwd_dev.lse, p);
  EXPECT_TRUE(gpuMatches(got.gq, want.gq, gradTol(t, want.gq), what + " gq"));
  EXPECT_TRUE(gpuMatches(got.gk, want.gk, gradTol(t, want.gk), what + " gk"));
  EXPECT_TRUE(gpuMatches(got.gv, want.gv, gradTol(t, want.gv), what + " gv"));
  EXPECT_TRUE(got.gq.isContiguous() && got.gk.isContiguous() && got.gv.isContiguous()) << what;
}

}  // namespace

TEST(GpuLayerNorm, forward_matches_cpu_with_and_without_affine) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (const NormCase& c : kNormCases) {
      for (const Affine& a : kAffine) {
        const std::string what = normName(t, c, a);
        // Shifted off zero, so the variance is not computed around a mean of ~0.
        Views x = drawn(c.shape, t, 1, c.transposed, -1.0, 3.0);
        Tensor w = a.weight ? hostRandom(c.normalized, t, 2, 0.5, 1.5) : Tensor();
        Tensor b = a.bias ? hostRandom(c.normalized, t, 3) : Tensor();
        auto want = kernels::layerNormForward(x.host, c.normalized, w, b, 1e-5);
        auto got =
            kernels::layerNormForward(x.dev, c.normalized, a.weight ? gpu(w) : w, a.bias ? gpu(b) : b, 1e-5);
        EXPECT_TRUE(gpuMatches(got.y, want.y, accumTol(t), what + " y"));
        EXPECT_EQ(got.mean.dtype(), statDType(t)) << what;
        EXPECT_EQ(got.variance.dtype(), statDType(t)) << what;
        EXPECT_TRUE(gpuMatches(got.mean, want.mean, accumTol(statDType(t)), what + " mean"));
        EXPECT_TRUE(gpuMatches(got.variance, want.variance, accumTol(statDType(t)), what + " variance"));
      }
    }
  }
}

TEST(GpuLayerNorm, backward_matches_cpu_with_and_without_affine) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (const NormCase& c : kNormCases) {
      for (const Affine& a : kAffine) {
        const std::string what = normName(t, c, a);
        Views x = drawn(c.shape, t, 1, c.transposed, -1.0, 3.0);
        Tensor w = a.weight ? hostRandom(c.normalized, t, 2, 0.5, 1.5) : Tensor();
        Tensor b = a.bias ? hostRandom(c.normalized, t, 3) : Tensor();
        Tensor wd = a.weight ? gpu(w) : w, bd = a.bias ? gpu(b) : b;
        Tensor gy = hostRandom(x.host.shape(), t, 4);
        // Both sides from the CPU's statistics: a forward error does not show up here.
        auto fwd = kernels::layerNormForward(x.host, c.normalized, w, b, 1e-5);
        auto want = kernels::layerNormBackward(gy, x.host, fwd.mean, fwd.variance, c.normalized, w, b, 1e-5);
        auto got = kernels::layerNormBackward(gpu(gy), x.dev, gpu(fwd.mean), gpu(fwd.variance), c.normalized,
                                              wd, bd, 1e-5);
        EXPECT_TRUE(gpuMatches(got.gx, want.gx, accumTol(t), what + " gx"));
        ASSERT_EQ(got.gweight.defined(), a.weight) << what;
        ASSERT_EQ(got.gbias.defined(), a.bias) << what;
        if (a.weight) {
          EXPECT_TRUE(gpuMatches(got.gweight, want.gweight, accumTol(t), what + " gweight"));
        }
        if (a.bias) {
          EXPECT_TRUE(gpuMatches(got.gbias, want.gbias, accumTol(t), what + " gbias"));
        }
      }
    }
  }
}

TEST(GpuTransformer, embedding_forward_gathers_rows_by_gpu_indices_as_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  std::vector<int64_t> ix(8 * 64);
  for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<int64_t>((i * 7 + 3) % 10);
  const Tensor indices = Tensor::fromVector(ix, {8, 64});
  for (DType t : kFloatDTypes) {
    for (int64_t d : {5, 64, 300}) {
      Tensor w = hostRandom({11, d}, t, 1);
      for (bool transposed : {false, true}) {  // indices as a strided view on the GPU too
        const std::string what = name(t, {11, d}) + (transposed ? " transposed indices" : "");
        Tensor ih = transposed ? indices.transpose(0, 1) : indices;
        Tensor id = transposed ? gpu(indices).transpose(0, 1) : gpu(indices);
        // A gather moves bits: exactly the CPU's rows.
        EXPECT_TRUE(gpuMatches(kernels::embeddingForward(gpu(w), id), kernels::embeddingForward(w, ih),
                               lockstep::testing::kExact, what));
      }
    }
  }
}

TEST(GpuTransformer, embedding_backward_accumulates_repeats_and_leaves_padding_row_zero) {
  LOCKSTEP_REQUIRE_GPU();
  // 512 indices over rows 0..9, about 51 repeats each; row 10 is never indexed.
  std::vector<int64_t> ix(8 * 64);
  for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<int64_t>((i * 7 + 3) % 10);
  const Tensor indices = Tensor::fromVector(ix, {8, 64});
  for (DType t : kFloatDTypes) {
    for (int64_t d : {5, 64, 300}) {
      Tensor gy = hostRandom({8, 64, d}, t, 2);
      for (int64_t pad : {-1, 0, 4}) {
        const std::string what = name(t, {11, d}) + " padding_idx " + std::to_string(pad);
        Tensor want = kernels::embeddingBackward(gy, indices, 11, pad);
        Tensor got = kernels::embeddingBackward(gpu(gy), gpu(indices), 11, pad);
        // The CPU accumulates in f32 (f64) and rounds once; so must the GPU.
        EXPECT_TRUE(gpuMatches(got, want, accumTol(t), what));
        const std::vector<double> zeros(static_cast<size_t>(d), 0.0);
        EXPECT_EQ(got.narrow(0, 10, 1).toVector<double>(), zeros) << what << ": row never indexed";
        if (pad >= 0) {
          EXPECT_EQ(got.narrow(0, pad, 1).toVector<double>(), zeros) << what << ": padding row";
        }
      }
    }
  }
}

TEST(GpuTransformer, embedding_out_of_range_gpu_index_is_an_index_error) {
  LOCKSTEP_REQUIRE_GPU();
  Tensor w = hostRandom({10, 4}, DType::f32, 1), wd = gpu(w);
  EXPECT_THROW(kernels::embeddingForward(wd, gpu(Tensor::fromVector<int64_t>({1, 2, 10}, {3}))), IndexError);
  EXPECT_THROW(kernels::embeddingForward(wd, gpu(Tensor::fromVector<int64_t>({-1}, {1}))), IndexError);
  // The error leaves the GPU usable (no device-side trap): a valid lookup still matches the CPU.
  Tensor ok = Tensor::fromVector<int64_t>({9, 0, 3}, {3});
  EXPECT_TRUE(gpuMatches(kernels::embeddingForward(wd, gpu(ok)), kernels::embeddingForward(w, ok),
                         lockstep::testing::kExact, "after the error"));
}

TEST(GpuTransformer, rms_norm_forward_matches_cpu_with_and_without_weight) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (const NormCase& c : kNormCases) {
      for (bool with_w : {true, false}) {
        const std::string what = rmsName(t, c, with_w);
        Views x = drawn(c.shape, t, 5, c.transposed, -2.0, 2.0);
        const int64_t d = x.host.shape().back();
        Tensor w = with_w ? hostRandom({d}, t, 6, 0.5, 1.5) : Tensor();
        auto want = kernels::rmsNormForward(x.host, w, 1e-6);
        auto got = kernels::rmsNormForward(x.dev, with_w ? gpu(w) : w, 1e-6);
        EXPECT_TRUE(gpuMatches(got.y, want.y, accumTol(t), what + " y"));
        EXPECT_EQ(got.rstd.dtype(), statDType(t)) << what;
        EXPECT_TRUE(gpuMatches(got.rstd, want.rstd, accumTol(statDType(t)), what + " rstd"));
      }
    }
  }
}

TEST(GpuTransformer, rms_norm_backward_matches_cpu_with_and_without_weight) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (const NormCase& c : kNormCases) {
      for (bool with_w : {true, false}) {
        const std::string what = rmsName(t, c, with_w);
        Views x = drawn(c.shape, t, 5, c.transposed, -2.0, 2.0);
        const int64_t d = x.host.shape().back();
        Tensor w = with_w ? hostRandom({d}, t, 6, 0.5, 1.5) : Tensor();
        Tensor gy = hostRandom(x.host.shape(), t, 7);
        const Tensor rstd = kernels::rmsNormForward(x.host, w, 1e-6).rstd;  // the CPU's, on both sides
        auto want = kernels::rmsNormBackward(gy, x.host, rstd, w);
        auto got = kernels::rmsNormBackward(gpu(gy), x.dev, gpu(rstd), with_w ? gpu(w) : w);
        EXPECT_TRUE(gpuMatches(got.gx, want.gx, accumTol(t), what + " gx"));
        ASSERT_EQ(got.gweight.defined(), with_w) << what;
        if (with_w) {
          EXPECT_TRUE(gpuMatches(got.gweight, want.gweight, accumTol(t), what + " gweight"));
        }
      }
    }
  }
}

TEST(GpuTransformer, swiglu_forward_and_backward_match_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  struct Case {
    Shape shape;
    bool transposed;
  };
  for (DType t : kFloatDTypes) {
    for (const Case& c : {Case{{3, 41}, false}, Case{{257, 129}, false}, Case{{129, 70}, true}}) {
      const std::string what = name(t, c.shape) + (c.transposed ? " transposed" : "");
      Views gate = drawn(c.shape, t, 8, c.transposed, -6.0, 6.0), up = drawn(c.shape, t, 9, c.transposed);
      // silu's exp: values against the f64 oracle, as GpuActivation's.
      Tensor y = oracle(kernels::swigluForward(f64(gate.host), f64(up.host)), t);
      Tensor y_dev = kernels::swigluForward(gate.dev, up.dev);
      EXPECT_TRUE(gpuMatches(y_dev, y, what));
      EXPECT_TRUE(y_dev.isContiguous()) << what;
      Tensor gy = hostRandom(y.shape(), t, 10);
      auto [ggate, gup] = kernels::swigluBackward(f64(gy), f64(gate.host), f64(up.host));
      auto [ggate_dev, gup_dev] = kernels::swigluBackward(gpu(gy), gate.dev, up.dev);
      EXPECT_TRUE(gpuMatches(ggate_dev, oracle(ggate, t), what + " dgate"));
      EXPECT_TRUE(gpuMatches(gup_dev, oracle(gup, t), what + " dup"));
    }
  }
}

TEST(GpuTransformer, rotary_forward_and_backward_match_cpu_on_strided_heads) {
  LOCKSTEP_REQUIRE_GPU();
  struct Case {
    Shape shape;      // of the draw
    bool transposed;  // [B, T, H, D] seen as [B, H, T, D], as the attention's q and k
  };
  const Case cases[] = {
      {{2, 37, 3, 8}, true}, {{2, 37, 3, 64}, true}, {{1, 5, 4, 128}, true}, {{3, 37, 100}, false}};
  for (DType t : kFloatDTypes) {
    for (const Case& c : cases) {
      auto view = [&](const Tensor& base) { return c.transposed ? base.transpose(1, 2) : base; };
      Tensor xh = hostRandom(c.shape, t, 11), gh = hostRandom(c.shape, t, 12);
      Tensor x = view(xh), x_dev = view(gpu(xh)), g = view(gh), g_dev = view(gpu(gh));
      const int64_t T = x.size(x.dim() - 2), D = x.size(x.dim() - 1);
      for (DType table : {DType::f32, t}) {  // Llama's tables are f32 whatever the activations
        const std::string what = name(t, x.shape()) + " tables " + dtypeName(table);
        Tensor cs = hostRandom({T, D / 2}, table, 13), sn = hostRandom({T, D / 2}, table, 14);
        Tensor y = kernels::rotaryForward(x, cs, sn);
        Tensor y_dev = kernels::rotaryForward(x_dev, gpu(cs), gpu(sn));
        EXPECT_TRUE(gpuMatches(y_dev, y, what));
        EXPECT_TRUE(y_dev.isContiguous()) << what;
        EXPECT_TRUE(gpuMatches(kernels::rotaryBackward(g_dev, gpu(cs), gpu(sn)),
                               kernels::rotaryBackward(g, cs, sn), what + " backward"));
      }
    }
  }
}

TEST(GpuAttention, forward_matches_cpu_over_head_dims_causal_and_gqa) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (const AttnCase& c : kAttnCases) {
      for (bool causal : {false, true}) {
        const auto p = attnParams(c, causal);
        const Qkv host = hostQkv(c, t), dev = onGpu(host);
        expectForwardMatches(kernels::attentionForward(dev.q, dev.k, dev.v, p),
                             kernels::attentionForward(host.q, host.k, host.v, p), t, attnName(t, c, p));
      }
    }
  }
}

TEST(GpuAttention, backward_matches_cpu_over_head_dims_causal_and_gqa) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    for (const AttnCase& c : kAttnCases) {
      for (bool causal : {false, true}) {
        const auto p = attnParams(c, causal);
        const Qkv host = hostQkv(c, t), dev = onGpu(host);
        // Both from the CPU's forward: a forward error does not show up here.
        auto fwd = kernels::attentionForward(host.q, host.k, host.v, p);
        expectGradsMatch(host, dev, fwd, {gpu(fwd.out), gpu(fwd.lse)}, p, attnName(t, c, p));
      }
    }
  }
}

TEST(GpuAttention, dropout_keeps_the_cpu_decisions_in_forward_and_backward) {
  LOCKSTEP_REQUIRE_GPU();
  // Weight (b, h, i, j) is kept iff the Philox draw at offset + ((b * H + h) * T + i) * S + j is:
  // one decision the GPU gets wrong shows as a whole weight of difference. An offset past 2^32
  // catches a counter cut to 32 bits.
  for (DType t : kFloatDTypes) {
    for (const AttnCase& c : kAttnCases) {
      for (bool causal : {false, true}) {
        for (uint64_t offset : {uint64_t{0}, uint64_t{77}, (uint64_t{1} << 32) + 12345}) {
          const auto p = attnParams(c, causal, 0.2, offset);
          const std::string what = attnName(t, c, p);
          const Qkv host = hostQkv(c, t), dev = onGpu(host);
          auto want = kernels::attentionForward(host.q, host.k, host.v, p);
          auto got = kernels::attentionForward(dev.q, dev.k, dev.v, p);
          expectForwardMatches(got, want, t, what);
          expectGradsMatch(host, dev, want, got, p, what);
        }
      }
    }
  }
}

TEST(GpuAttention, reads_strided_heads_of_a_fused_qkv_projection) {
  LOCKSTEP_REQUIRE_GPU();
  // GPT's layout: qkv [B, T, 3, H, D] from one projection, each part viewed as [B, H, T, D] (row
  // stride 3 * H * D, head stride D, last dim contiguous), read in place.
  const int64_t B = 2, T = 45, H = 4, D = 64;
  auto heads = [](const Tensor& qkv, int64_t part) {
    return qkv.narrow(2, part, 1).squeeze(2).transpose(1, 2);
  };
  for (DType t : kFloatDTypes) {
    for (bool causal : {false, true}) {
      Tensor fused = hostRandom({B, T, 3, H, D}, t, 15, -2.0, 2.0), fused_dev = gpu(fused);
      const Qkv host{heads(fused, 0), heads(fused, 1), heads(fused, 2)};
      const Qkv dev{heads(fused_dev, 0), heads(fused_dev, 1), heads(fused_dev, 2)};
      ASSERT_FALSE(dev.q.isContiguous());
      ASSERT_EQ(dev.q.stride(3), 1);
      const auto p = attnParams({B, H, H, T, T, D}, causal);
      const std::string what = attnName(t, {B, H, H, T, T, D}, p) + " fused qkv";
      auto want = kernels::attentionForward(host.q, host.k, host.v, p);
      auto got = kernels::attentionForward(dev.q, dev.k, dev.v, p);
      expectForwardMatches(got, want, t, what);
      expectGradsMatch(host, dev, want, got, p, what);
    }
  }
}

TEST(GpuAttention, head_dim_256_runs_and_320_is_not_supported) {
  LOCKSTEP_REQUIRE_GPU();
  for (DType t : kFloatDTypes) {
    const AttnCase largest{1, 2, 1, 40, 40, 256};
    const auto p = attnParams(largest, true);
    const std::string what = attnName(t, largest, p);
    const Qkv host = hostQkv(largest, t), dev = onGpu(host);
    auto want = kernels::attentionForward(host.q, host.k, host.v, p);
    auto got = kernels::attentionForward(dev.q, dev.k, dev.v, p);
    expectForwardMatches(got, want, t, what);
    expectGradsMatch(host, dev, want, got, p, what);

    // D = 320: refused by name on the GPU (the CPU computes it), forward and backward.
    const AttnCase wide{1, 2, 2, 4, 4, 320};
    const Qkv wh = hostQkv(wide, t), wd = onGpu(wh);
    const auto pw = attnParams(wide, false);
    EXPECT_THROW(kernels::attentionForward(wd.q, wd.k, wd.v, pw), NotSupportedError) << dtypeName(t);
    auto fwd = kernels::attentionForward(wh.q, wh.k, wh.v, pw);
    EXPECT_THROW(kernels::attentionBackward(gpu(fwd.out), wd.q, wd.k, wd.v, gpu(fwd.out), gpu(fwd.lse), pw),
                 NotSupportedError)
        << dtypeName(t);
  }
}
