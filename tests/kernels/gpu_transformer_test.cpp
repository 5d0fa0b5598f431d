// The CUDA transformer kernels beyond gpu_ops_test.cpp's table (layer norm, RMSNorm, embedding,
// SwiGLU, rotary and attention in every dtype): the attention's Philox dropout decisions, heads read
// strided out of a fused projection, the head dims it supports, the embedding's untouched rows and
// the errors a GPU must raise. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_compare.h"
#include "lockstep/kernels.h"
#include "lockstep/kernels/cuda/fused_attention.h"
#include "lockstep/kernels/gpu_math_options.h"
#include "lockstep/tensor/cuda/allocator.h"

using namespace lockstep;
using lockstep::testing::gpu;
using lockstep::testing::gpuMatches;
using lockstep::testing::hostRandom;
using lockstep::testing::kFloatDTypes;
using lockstep::testing::Tol;
using lockstep::testing::tolFor;

namespace {

std::string name(DType t, const Shape& shape) {
  return std::string(dtypeName(t)) + " " + shapeToString(shape);
}

double maxAbs(const Tensor& t) {
  double m = 0;
  for (double x : t.toVector<double>()) m = std::max(m, std::abs(x));
  return m;
}

// Gradients grow with S and with the query heads sharing a kv head: atol in units of the largest.
Tol gradTol(DType t, const Tensor& want) {
  Tol tol = tolFor(t, lockstep::testing::OpClass::attention);
  tol.atol *= std::max(1.0, maxAbs(want));
  return tol;
}
// The logsumexp is f32 (f64) for every input dtype: scores of the same rounded inputs.
Tol lseTol(DType t) { return t == DType::f64 ? Tol{1e-10, 1e-10} : Tol{2e-5, 2e-5}; }

// ---- attention cases ----

struct AttnCase {
  int64_t b, h, hkv, t, s, d;
};
// T past a 64-row block, GQA (H 4, Hkv 2), T < S and T > S, one query, D in {8, 32, 64, 100, 128}:
// the tiled kernels take D <= 64 (several query and key blocks in the D 32 case), the warp-per-row
// ones the rest.
const AttnCase kAttnCases[] = {{2, 2, 2, 37, 37, 8},   {1, 4, 2, 70, 70, 64},   {2, 2, 1, 130, 200, 32},
                               {2, 2, 2, 33, 65, 100}, {1, 4, 2, 129, 50, 128}, {1, 4, 2, 1, 70, 64}};

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

// Contiguous (lockstep's kernel) or token-major (cuDNN's: memory [B, T, H, D], so the heads merge
// without a copy), as kernels::AttentionOutput allows.
bool denseHeads(const Tensor& t) { return t.isContiguous() || t.transpose(1, 2).isContiguous(); }

void expectForwardMatches(const kernels::AttentionOutput& got, const kernels::AttentionOutput& want, DType t,
                          const std::string& what) {
  EXPECT_TRUE(gpuMatches(got.out, want.out, tolFor(t, lockstep::testing::OpClass::attention), what + " out"));
  EXPECT_TRUE(denseHeads(got.out)) << what;
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
  EXPECT_TRUE(denseHeads(got.gq) && denseHeads(got.gk) && denseHeads(got.gv)) << what;
}

}  // namespace

// The values are gpu_ops_test.cpp's; here the rows no index reaches stay exactly zero.
TEST(GpuTransformer, embedding_backward_leaves_unindexed_and_padding_rows_zero) {
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
        Tensor got = kernels::embeddingBackward(gpu(gy), gpu(indices), 11, pad);
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

// The backward written into the thirds of one fused projection's gradient (autograd's
// packedQkvAttention): cuDNN writes them in place in bf16/f16 (attentionBackwardInto's GPU entry says
// it ran), lockstep's kernel (f32) through copies; both the CPU's values, the buffer's every element
// written.
TEST(GpuAttention, backward_into_a_fused_projections_gradient) {
  LOCKSTEP_REQUIRE_GPU();
  const int64_t B = 2, T = 130, H = 4, D = 64;
  auto heads = [](const Tensor& qkv, int64_t part) {
    return qkv.narrow(2, part, 1).squeeze(2).transpose(1, 2);
  };
  for (DType t : {DType::bf16, DType::f16, DType::f32}) {
    Tensor fused = hostRandom({B, T, 3, H, D}, t, 17, -2.0, 2.0), fused_dev = gpu(fused);
    const Qkv host{heads(fused, 0), heads(fused, 1), heads(fused, 2)};
    const Qkv dev{heads(fused_dev, 0), heads(fused_dev, 1), heads(fused_dev, 2)};
    const auto p = attnParams({B, H, H, T, T, D}, true);
    const std::string what = attnName(t, {B, H, H, T, T, D}, p) + " into a fused gradient";
    auto fwd_host = kernels::attentionForward(host.q, host.k, host.v, p);
    auto fwd_dev = kernels::attentionForward(dev.q, dev.k, dev.v, p);
    Tensor gout = hostRandom(host.q.shape(), t, 18);
    auto want = kernels::attentionBackward(gout, host.q, host.k, host.v, fwd_host.out, fwd_host.lse, p);
    Tensor grad = Tensor::full({B, T, 3, H, D}, std::nan(""), t, Device::cuda(0));
    const kernels::AttentionGrads into{heads(grad, 0), heads(grad, 1), heads(grad, 2)};
    if (t != DType::f32) {
      EXPECT_TRUE(kernels::cuda::attentionBackwardInto(gpu(gout), dev.q, dev.k, dev.v, fwd_dev.out,
                                                       fwd_dev.lse, p, into))
          << what << ": cuDNN did not write in place";
    }
    kernels::attentionBackwardInto(gpu(gout), dev.q, dev.k, dev.v, fwd_dev.out, fwd_dev.lse, p, into);
    EXPECT_TRUE(gpuMatches(into.gq, want.gq, gradTol(t, want.gq), what + " gq"));
    EXPECT_TRUE(gpuMatches(into.gk, want.gk, gradTol(t, want.gk), what + " gk"));
    EXPECT_TRUE(gpuMatches(into.gv, want.gv, gradTol(t, want.gv), what + " gv"));
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

// bf16/f16 attention without dropout runs on cuDNN's fused SDPA (kernels/cuda/fused_attention.h):
// held to the CPU like lockstep's kernel, on GPT's and Llama's shapes (a causal T = 256 past
// cuDNN's 64/128-row tiles, grouped-query heads, head dims 32 to 256, T != S, strided heads of a
// fused projection); its backward repeats bitwise (deterministic by default) and takes either
// kernel's forward (the same logsumexp).
TEST(GpuAttention, cudnn_fused_attention_matches_the_cpu_repeats_and_mixes_with_lockstep_kernel) {
  LOCKSTEP_REQUIRE_GPU();
  const AttnCase cases[] = {
      {2, 12, 12, 256, 256, 64}, {1, 8, 2, 130, 130, 128}, {2, 4, 4, 64, 96, 32}, {1, 2, 1, 70, 70, 256}};
  for (DType t : {DType::bf16, DType::f16}) {
    for (const AttnCase& c : cases) {
      for (bool causal : {false, true}) {
        const auto p = attnParams(c, causal);
        const std::string what = attnName(t, c, p) + " cuDNN";
        const Qkv host = hostQkv(c, t), dev = onGpu(host);
        const int64_t before = kernels::cuda::fusedAttentionRuns();
        auto want = kernels::attentionForward(host.q, host.k, host.v, p);
        auto got = kernels::attentionForward(dev.q, dev.k, dev.v, p);
        EXPECT_EQ(kernels::cuda::fusedAttentionRuns(), before + 1)
            << what << ": cuDNN did not take the forward";
        expectForwardMatches(got, want, t, what);
        expectGradsMatch(host, dev, want, got, p, what);
        EXPECT_EQ(kernels::cuda::fusedAttentionRuns(), before + 2)
            << what << ": cuDNN did not take the backward";

        Tensor gout = gpu(hostRandom(host.q.shape(), t, 4));
        auto g1 = kernels::attentionBackward(gout, dev.q, dev.k, dev.v, got.out, got.lse, p);
        auto g2 = kernels::attentionBackward(gout, dev.q, dev.k, dev.v, got.out, got.lse, p);
        // cuDNN writes token-major: merging the heads of O, dQ, dK, dV is a view.
        EXPECT_TRUE(got.out.transpose(1, 2).isContiguous()) << what;
        EXPECT_TRUE(g1.gq.transpose(1, 2).isContiguous() && g1.gk.transpose(1, 2).isContiguous() &&
                    g1.gv.transpose(1, 2).isContiguous())
            << what;
        EXPECT_EQ(g1.gq.to(Device::cpu()).toVector<double>(), g2.gq.to(Device::cpu()).toVector<double>())
            << what << ": gq repeats";
        EXPECT_EQ(g1.gk.to(Device::cpu()).toVector<double>(), g2.gk.to(Device::cpu()).toVector<double>())
            << what << ": gk repeats";
        EXPECT_EQ(g1.gv.to(Device::cpu()).toVector<double>(), g2.gv.to(Device::cpu()).toVector<double>())
            << what << ": gv repeats";

        // lockstep's kernel (cudnn_sdp off) against cuDNN: forward, and each backward from the other's
        // forward.
        kernels::GpuMathOptions off = kernels::gpuMathOptions();
        off.cudnn_sdp = false;
        kernels::AttentionOutput own;
        kernels::AttentionGrads own_grads;
        {
          const kernels::ScopedGpuMathOptions scope(off);
          own = kernels::attentionForward(dev.q, dev.k, dev.v, p);
          own_grads = kernels::attentionBackward(gout, dev.q, dev.k, dev.v, got.out, got.lse, p);
        }
        EXPECT_TRUE(gpuMatches(got.out, own.out.to(Device::cpu()),
                               tolFor(t, lockstep::testing::OpClass::attention),
                               what + " out vs lockstep's kernel"));
        EXPECT_TRUE(
            gpuMatches(got.lse, own.lse.to(Device::cpu()), lseTol(t), what + " lse vs lockstep's kernel"));
        auto mixed = kernels::attentionBackward(gout, dev.q, dev.k, dev.v, own.out, own.lse, p);
        EXPECT_TRUE(gpuMatches(mixed.gq, own_grads.gq.to(Device::cpu()),
                               gradTol(t, own_grads.gq.to(Device::cpu())), what + " gq mixed"));
        EXPECT_TRUE(gpuMatches(mixed.gk, own_grads.gk.to(Device::cpu()),
                               gradTol(t, own_grads.gk.to(Device::cpu())), what + " gk mixed"));
        EXPECT_TRUE(gpuMatches(mixed.gv, own_grads.gv.to(Device::cpu()),
                               gradTol(t, own_grads.gv.to(Device::cpu())), what + " gv mixed"));
      }
    }
  }
  // What cuDNN does not take runs on lockstep's kernel: dropout (the CPU's mask), f32, head dim 100.
  const AttnCase c{1, 2, 2, 40, 40, 64};
  const Qkv host = hostQkv(c, DType::bf16), dev = onGpu(host);
  const int64_t before = kernels::cuda::fusedAttentionRuns();
  kernels::attentionForward(dev.q, dev.k, dev.v, attnParams(c, true, 0.1));
  const Qkv host32 = hostQkv(c, DType::f32), dev32 = onGpu(host32);
  kernels::attentionForward(dev32.q, dev32.k, dev32.v, attnParams(c, true));
  const AttnCase odd{1, 2, 2, 40, 40, 100};
  const Qkv odd_dev = onGpu(hostQkv(odd, DType::bf16));
  kernels::attentionForward(odd_dev.q, odd_dev.k, odd_dev.v, attnParams(odd, true));
  EXPECT_EQ(kernels::cuda::fusedAttentionRuns(), before);
}

// cuDNN's deterministic backward a chunk of keys per call (kernels/cuda/fused_attention.h: what long
// sequences take, so that its scratch grows linearly with T), forced onto small problems: it matches
// the CPU and the one-call backward, repeats bitwise, writes into a fused projection's gradient, and
// keys no row attends (causal with S > T) get zero gradients. Chunks of 2 keys or 2 rows included.
TEST(GpuAttention, cudnn_backward_in_key_chunks_matches_one_call_and_the_cpu) {
  LOCKSTEP_REQUIRE_GPU();
  struct ForceChunk {
    int64_t previous;
    explicit ForceChunk(int64_t keys) : previous(kernels::cuda::setFusedAttentionKeyChunk(keys)) {}
    ~ForceChunk() { kernels::cuda::setFusedAttentionKeyChunk(previous); }
  };
  struct Chunked {
    AttnCase c;
    int64_t keys;
  };
  // (T = S = 129: a tail of one key joins the chunk before it; cuDNN refuses one key by one row.)
  const Chunked cases[] = {{{2, 4, 2, 300, 300, 64}, 128},
                           {{1, 2, 2, 256, 256, 128}, 64},
                           {{1, 4, 4, 130, 330, 32}, 64},
                           {{2, 2, 1, 330, 130, 64}, 64},
                           {{1, 2, 2, 129, 129, 64}, 64}};
  auto host = [](const Tensor& x) { return x.to(Device::cpu()); };
  for (DType t : {DType::bf16, DType::f16}) {
    for (const auto& [c, keys] : cases) {
      for (bool causal : {false, true}) {
        const auto p = attnParams(c, causal);
        const std::string what = attnName(t, c, p) + " in chunks of " + std::to_string(keys) + " keys";
        const Qkv h = hostQkv(c, t), dev = onGpu(h);
        auto fwd_host = kernels::attentionForward(h.q, h.k, h.v, p);
        auto fwd = kernels::attentionForward(dev.q, dev.k, dev.v, p);
        Tensor gout_host = hostRandom(h.q.shape(), t, 4), gout = gpu(gout_host);
        auto want = kernels::attentionBackward(gout_host, h.q, h.k, h.v, fwd_host.out, fwd_host.lse, p);
        auto one = kernels::attentionBackward(gout, dev.q, dev.k, dev.v, fwd.out, fwd.lse, p);
        const int64_t before = kernels::cuda::fusedAttentionChunkedRuns();
        kernels::AttentionGrads g1, g2;
        {
          const ForceChunk force(keys);
          g1 = kernels::attentionBackward(gout, dev.q, dev.k, dev.v, fwd.out, fwd.lse, p);
          g2 = kernels::attentionBackward(gout, dev.q, dev.k, dev.v, fwd.out, fwd.lse, p);
        }
        EXPECT_EQ(kernels::cuda::fusedAttentionChunkedRuns(), before + 2) << what << ": not chunked";
        EXPECT_TRUE(gpuMatches(g1.gq, want.gq, gradTol(t, want.gq), what + " gq"));
        EXPECT_TRUE(gpuMatches(g1.gk, want.gk, gradTol(t, want.gk), what + " gk"));
        EXPECT_TRUE(gpuMatches(g1.gv, want.gv, gradTol(t, want.gv), what + " gv"));
        EXPECT_TRUE(gpuMatches(g1.gq, host(one.gq), gradTol(t, host(one.gq)), what + " gq vs one call"));
        EXPECT_TRUE(gpuMatches(g1.gk, host(one.gk), gradTol(t, host(one.gk)), what + " gk vs one call"));
        EXPECT_TRUE(gpuMatches(g1.gv, host(one.gv), gradTol(t, host(one.gv)), what + " gv vs one call"));
        EXPECT_TRUE(denseHeads(g1.gq) && denseHeads(g1.gk) && denseHeads(g1.gv)) << what;
        EXPECT_EQ(host(g1.gq).toVector<double>(), host(g2.gq).toVector<double>()) << what << ": gq repeats";
        EXPECT_EQ(host(g1.gk).toVector<double>(), host(g2.gk).toVector<double>()) << what << ": gk repeats";
        EXPECT_EQ(host(g1.gv).toVector<double>(), host(g2.gv).toVector<double>()) << what << ": gv repeats";
        if (causal && c.s > c.t) {
          for (const Tensor* g : {&g1.gk, &g1.gv}) {
            for (double x : host(g->narrow(2, c.t, c.s - c.t)).toVector<double>()) {
              ASSERT_EQ(x, 0.0) << what << ": a key no row attends";
            }
          }
        }
      }
    }
  }
  // Into the thirds of a fused projection's gradient (GPT's packed attention), chunked.
  const int64_t B = 2, T = 300, H = 4, D = 64;
  auto heads = [](const Tensor& qkv, int64_t part) {
    return qkv.narrow(2, part, 1).squeeze(2).transpose(1, 2);
  };
  Tensor fused = hostRandom({B, T, 3, H, D}, DType::bf16, 17, -2.0, 2.0), fused_dev = gpu(fused);
  const Qkv h{heads(fused, 0), heads(fused, 1), heads(fused, 2)};
  const Qkv dev{heads(fused_dev, 0), heads(fused_dev, 1), heads(fused_dev, 2)};
  const auto p = attnParams({B, H, H, T, T, D}, true);
  auto fwd_host = kernels::attentionForward(h.q, h.k, h.v, p);
  auto fwd = kernels::attentionForward(dev.q, dev.k, dev.v, p);
  Tensor gout = hostRandom(h.q.shape(), DType::bf16, 18);
  auto want = kernels::attentionBackward(gout, h.q, h.k, h.v, fwd_host.out, fwd_host.lse, p);
  Tensor grad = Tensor::full({B, T, 3, H, D}, std::nan(""), DType::bf16, Device::cuda(0));
  const kernels::AttentionGrads into{heads(grad, 0), heads(grad, 1), heads(grad, 2)};
  const int64_t chunked = kernels::cuda::fusedAttentionChunkedRuns();
  const int64_t in_place = kernels::cuda::fusedAttentionInPlaceRuns();
  {
    const ForceChunk force(128);
    EXPECT_TRUE(
        kernels::cuda::attentionBackwardInto(gpu(gout), dev.q, dev.k, dev.v, fwd.out, fwd.lse, p, into));
  }
  EXPECT_EQ(kernels::cuda::fusedAttentionChunkedRuns(), chunked + 1);
  EXPECT_EQ(kernels::cuda::fusedAttentionInPlaceRuns(), in_place + 1);
  EXPECT_TRUE(gpuMatches(into.gq, want.gq, gradTol(DType::bf16, want.gq), "chunked into gq"));
  EXPECT_TRUE(gpuMatches(into.gk, want.gk, gradTol(DType::bf16, want.gk), "chunked into gk"));
  EXPECT_TRUE(gpuMatches(into.gv, want.gv, gradTol(DType::bf16, want.gv), "chunked into gv"));
  EXPECT_THROW(kernels::cuda::setFusedAttentionKeyChunk(100), ValueError);
  EXPECT_THROW(kernels::cuda::setFusedAttentionKeyChunk(-64), ValueError);
}

// Chosen by size, not forced: B 2, 12 heads of 64, T 4,096, causal: one call's dP scratch would be
// 805 MB (2 x 12 x 4096 x 4096 x 2 bytes), past the bound (256 MiB); in chunks of 1,280 keys the
// step's peak stays far under it. Checked against lockstep's own kernel on the GPU (the CPU's would
// take a while at this size).
TEST(GpuAttention, long_sequences_take_the_chunked_backward_by_themselves) {
  LOCKSTEP_REQUIRE_GPU();
  const AttnCase c{2, 12, 12, 4096, 4096, 64};
  const auto p = attnParams(c, true);
  const Qkv dev = onGpu(hostQkv(c, DType::bf16));
  auto fwd = kernels::attentionForward(dev.q, dev.k, dev.v, p);
  Tensor gout = gpu(hostRandom(dev.q.shape(), DType::bf16, 4));
  auto& alloc = lockstep::cuda::CudaCachingAllocator::forDevice(0);
  const size_t base = alloc.stats().allocated_current;
  alloc.resetPeakStats();
  const int64_t before = kernels::cuda::fusedAttentionChunkedRuns();
  auto got = kernels::attentionBackward(gout, dev.q, dev.k, dev.v, fwd.out, fwd.lse, p);
  EXPECT_EQ(kernels::cuda::fusedAttentionChunkedRuns(), before + 1) << "T 4096 was not chunked";
  const size_t peak = alloc.stats().allocated_peak - base;
  EXPECT_LT(peak, size_t{500} << 20) << "the backward's peak above its inputs";
  kernels::GpuMathOptions off = kernels::gpuMathOptions();
  off.cudnn_sdp = false;
  kernels::AttentionGrads own;
  {
    const kernels::ScopedGpuMathOptions scope(off);
    own = kernels::attentionBackward(gout, dev.q, dev.k, dev.v, fwd.out, fwd.lse, p);
  }
  for (auto [g, o, name] : {std::tuple{&got.gq, &own.gq, "gq"}, std::tuple{&got.gk, &own.gk, "gk"},
                            std::tuple{&got.gv, &own.gv, "gv"}}) {
    const Tensor want = o->to(Device::cpu());
    EXPECT_TRUE(gpuMatches(*g, want, gradTol(DType::bf16, want), std::string("T 4096 chunked ") + name));
  }
}
