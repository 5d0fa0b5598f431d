#include "lockstep/kernels/attention.h"

#include "common/check.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/tables/attention.h"

using namespace lockstep;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {
struct Case {
  int64_t b, h, hkv, t, s, d;
  bool causal;
  double dropout;
};

std::string describe(const Case& c) {
  return "B=" + std::to_string(c.b) + " H=" + std::to_string(c.h) + " Hkv=" + std::to_string(c.hkv) +
         " T=" + std::to_string(c.t) + " S=" + std::to_string(c.s) + " D=" + std::to_string(c.d) +
         (c.causal ? " causal" : "") + " p=" + std::to_string(c.dropout);
}

// The blocked f32 kernel against the f64 definition, forward and backward.
void expectMatchesReference(const Case& c) {
  SCOPED_TRACE(describe(c));
  Tensor q = randomTensor({c.b, c.h, c.t, c.d}, DType::f32, 1, -2.0, 2.0);
  Tensor k = randomTensor({c.b, c.hkv, c.s, c.d}, DType::f32, 2, -2.0, 2.0);
  Tensor v = randomTensor({c.b, c.hkv, c.s, c.d}, DType::f32, 3);
  kernels::AttentionParams p;
  p.causal = c.causal;
  p.dropout_p = c.dropout;
  p.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  p.seed = 1234;
  p.offset = 77;
  auto fast = kernels::attentionForward(q, k, v, p);
  auto ref = kernels::reference::kAttention.attentionForward(q, k, v, p);
  EXPECT_EQ(fast.out.dtype(), DType::f32);
  EXPECT_TRUE(tensorsNear(fast.out, ref.out, 2e-5, 1e-4));
  EXPECT_TRUE(tensorsNear(fast.lse, ref.lse, 2e-5, 1e-5));
  Tensor g = randomTensor(q.shape(), DType::f32, 4);
  auto gf = kernels::attentionBackward(g, q, k, v, fast.out, fast.lse, p);
  auto gr = kernels::reference::kAttention.attentionBackward(g, q, k, v, ref.out, ref.lse, p);
  EXPECT_TRUE(tensorsNear(gf.gq, gr.gq, 1e-4, 1e-3));
  EXPECT_TRUE(tensorsNear(gf.gk, gr.gk, 1e-4, 1e-3));
  EXPECT_TRUE(tensorsNear(gf.gv, gr.gv, 1e-4, 1e-3));
}
}  // namespace

TEST(Attention, blocked_kernel_matches_reference) {
  // T not a multiple of the 64-row block, one head, batch 1, a single query, T != S both ways.
  for (bool causal : {false, true}) {
    expectMatchesReference({2, 3, 3, 70, 70, 16, causal, 0.0});
    expectMatchesReference({1, 1, 1, 130, 130, 64, causal, 0.0});
    expectMatchesReference({1, 2, 2, 1, 1, 8, causal, 0.0});
    expectMatchesReference({1, 1, 1, 5, 131, 8, causal, 0.0});
    expectMatchesReference({1, 1, 1, 131, 5, 8, causal, 0.0});
    expectMatchesReference({2, 1, 1, 64, 64, 32, causal, 0.0});
  }
}

TEST(Attention, grouped_query_heads_share_kv) {
  expectMatchesReference({2, 4, 2, 33, 33, 8, true, 0.0});
  expectMatchesReference({1, 6, 1, 65, 65, 8, false, 0.0});
}

TEST(Attention, dropout_mask_is_recomputed_in_backward_as_reference_draws_it) {
  // The reference draws its mask with Generator::bernoulli over [B, H, T, S]; the blocked kernel
  // must make the same decision per weight, in forward and again in backward.
  expectMatchesReference({2, 2, 2, 70, 70, 16, false, 0.3});
  expectMatchesReference({1, 4, 2, 67, 67, 8, true, 0.5});
}

TEST(Attention, reads_strided_views_in_place) {
  // [B, T, H, D] transposed to [B, H, T, D], the layout a qkv projection produces.
  Tensor base = randomTensor({2, 37, 3, 8}, DType::f32, 5, -2.0, 2.0);
  Tensor q = base.transpose(1, 2);
  kernels::AttentionParams p;
  p.causal = true;
  p.scale = 0.25;
  auto fast = kernels::attentionForward(q, q, q, p);
  auto ref =
      kernels::reference::kAttention.attentionForward(q.contiguous(), q.contiguous(), q.contiguous(), p);
  EXPECT_TRUE(tensorsNear(fast.out, ref.out, 2e-5, 1e-4));
  // The cpu kernel (whatever LOCKSTEP_KERNELS picks above) writes token-major, as the heads came:
  // going back to [B, T, H * D] is a view.
  const auto cpu = kernels::cpu::kAttention.attentionForward(q, q, q, p);
  EXPECT_TRUE(cpu.out.transpose(1, 2).isContiguous());
  EXPECT_TRUE(tensorsNear(cpu.out, ref.out, 2e-5, 1e-4));
  // Its backward reads the token-major output and a token-major dO in place and writes its
  // gradients token-major too; the values are the reference's on contiguous copies.
  Tensor gbase = randomTensor({2, 37, 3, 8}, DType::f32, 6, -1.0, 1.0);
  const Tensor gout = gbase.transpose(1, 2);
  auto grads = kernels::cpu::kAttention.attentionBackward(gout, q, q, q, cpu.out, cpu.lse, p);
  auto ref_grads = kernels::reference::kAttention.attentionBackward(
      gout.contiguous(), q.contiguous(), q.contiguous(), q.contiguous(), ref.out, ref.lse, p);
  for (const auto& [got, want] : {std::pair{grads.gq, ref_grads.gq}, std::pair{grads.gk, ref_grads.gk},
                                  std::pair{grads.gv, ref_grads.gv}}) {
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_TRUE(got.transpose(1, 2).isContiguous());
    EXPECT_TRUE(tensorsNear(got, want, 2e-5, 1e-4));
  }
}

// What the GPU's chunked backward (kernels/cuda/fused_attention.cpp, long sequences) stands on: the
// backward of a chunk of keys [a, e), given the rows that may attend them (rows [a, T) under the
// top-left causal mask, every row without it) with those rows' whole output and logsumexp, gives the
// chunk's dK and dV and its share of dQ; the shares sum to dQ. On the blocked f32 kernel, which as
// cuDNN's reads the softmax from the logsumexp and rowsum(dO * O) from the output it is given (the
// reference recomputes both from the keys it is given, so a chunk there is a smaller attention), with
// grouped-query heads, T = S, S > T (keys no row attends get zero) and T > S.
TEST(Attention, key_chunks_with_whole_row_statistics_sum_to_the_backward) {
  const Case cases[] = {{2, 4, 2, 150, 150, 16, false, 0.0},
                        {1, 2, 2, 70, 130, 8, false, 0.0},
                        {1, 2, 1, 130, 70, 8, false, 0.0}};
  const kernels::AttentionKernels& kernel = kernels::cpu::kAttention;
  const double atol = 2e-5, rtol = 1e-4;
  for (Case c : cases) {
    for (bool causal : {false, true}) {
      c.causal = causal;
      SCOPED_TRACE(describe(c));
      Tensor q = randomTensor({c.b, c.h, c.t, c.d}, DType::f32, 1, -2.0, 2.0);
      Tensor k = randomTensor({c.b, c.hkv, c.s, c.d}, DType::f32, 2, -2.0, 2.0);
      Tensor v = randomTensor({c.b, c.hkv, c.s, c.d}, DType::f32, 3);
      Tensor g = randomTensor(q.shape(), DType::f32, 4);
      kernels::AttentionParams p;
      p.causal = causal;
      p.scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      auto fwd = kernel.attentionForward(q, k, v, p);
      auto whole = kernel.attentionBackward(g, q, k, v, fwd.out, fwd.lse, p);
      Tensor gq = Tensor::zeros(q.shape(), DType::f32);
      const int64_t chunk = 32;
      for (int64_t a = 0; a < c.s; a += chunk) {
        const int64_t e = std::min(a + chunk, c.s), qa = causal ? a : 0;
        Tensor gk = whole.gk.narrow(2, a, e - a), gv = whole.gv.narrow(2, a, e - a);
        if (qa >= c.t) {  // no row attends these keys
          EXPECT_TRUE(tensorsNear(gk, Tensor::zeros(gk.shape(), DType::f32), 0.0));
          EXPECT_TRUE(tensorsNear(gv, Tensor::zeros(gv.shape(), DType::f32), 0.0));
          continue;
        }
        const int64_t rows = c.t - qa;
        auto part = kernel.attentionBackward(g.narrow(2, qa, rows), q.narrow(2, qa, rows),
                                             k.narrow(2, a, e - a), v.narrow(2, a, e - a),
                                             fwd.out.narrow(2, qa, rows), fwd.lse.narrow(2, qa, rows), p);
        EXPECT_TRUE(tensorsNear(part.gk, gk, atol, rtol)) << "dK of keys " << a;
        EXPECT_TRUE(tensorsNear(part.gv, gv, atol, rtol)) << "dV of keys " << a;
        Tensor gq_rows = gq.narrow(2, qa, rows);
        kernels::addInto(gq_rows, part.gq);
      }
      EXPECT_TRUE(tensorsNear(gq, whole.gq, atol, rtol)) << "the dQ shares' sum";
    }
  }
}

TEST(Attention, low_precision_runs_in_f32_and_rounds_the_output) {
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor q = randomTensor({1, 2, 19, 8}, DType::f32, 6), k = randomTensor({1, 2, 19, 8}, DType::f32, 7);
    Tensor v = randomTensor({1, 2, 19, 8}, DType::f32, 8);
    kernels::AttentionParams p;
    p.causal = true;
    p.scale = 0.3;
    auto r = kernels::attentionForward(q.to(low), k.to(low), v.to(low), p);
    auto f = kernels::attentionForward(q.to(low).to(DType::f32), k.to(low).to(DType::f32),
                                       v.to(low).to(DType::f32), p);
    EXPECT_EQ(r.out.dtype(), low);
    EXPECT_TRUE(tensorsNear(r.out, f.out.to(low), 0.0));
    auto g = kernels::attentionBackward(f.out.to(low), q.to(low), k.to(low), v.to(low), r.out, r.lse, p);
    EXPECT_EQ(g.gq.dtype(), low);
  }
}

TEST(Attention, rejects_mismatched_heads_and_shapes) {
  kernels::AttentionParams p;
  Tensor q = Tensor::zeros({1, 3, 4, 8}), k = Tensor::zeros({1, 2, 4, 8});
  try {
    kernels::attentionForward(q, k, k, p);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of key/value heads"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kernels::attentionForward(q, Tensor::zeros({1, 3, 4, 4}), Tensor::zeros({1, 3, 4, 4}), p),
               ValueError);
  EXPECT_THROW(kernels::attentionForward(Tensor::zeros({3, 4, 8}), k, k, p), ValueError);
}
