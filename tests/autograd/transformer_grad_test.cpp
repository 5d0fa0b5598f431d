#include "common/check.h"
#include "lockstep/autograd.h"

using namespace lockstep;
using namespace lockstep::autograd;
using lockstep::testing::gradientsMatch;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

TEST(Embedding, gradient_accumulates_and_skips_padding_row) {
  Tensor ix = Tensor::fromVector<int64_t>({2, 0, 2, 3, 2}, {5});
  Tensor w = randomTensor({4, 3}, DType::f64, 1);
  EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return embedding(in[0], ix); }, {w}));
  Variable vw(w.clone(), true);
  Variable y = embedding(vw, ix.reshape({1, 5}), 2);
  EXPECT_EQ(y.shape(), (Shape{1, 5, 3}));
  sum(y).backward();
  auto g = vw.grad().toVector<double>();
  EXPECT_EQ(std::vector<double>(g.begin() + 6, g.begin() + 9), std::vector<double>(3, 0.0));  // padding row 2
  EXPECT_EQ(std::vector<double>(g.begin(), g.begin() + 3), std::vector<double>(3, 1.0));      // row 0 once
  EXPECT_THROW(embedding(vw, ix, 4), ValueError);
  EXPECT_THROW(embedding(vw, Tensor::fromVector<int64_t>({4}, {1})), IndexError);
}

TEST(RmsNorm, gradient) {
  Tensor x = randomTensor({3, 5}, DType::f64, 2, -2.0, 2.0), w = randomTensor({5}, DType::f64, 3, 0.5, 1.5);
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return rmsNorm(in[0], in[1]); }, {x, w}));
  EXPECT_TRUE(
      gradientsMatch([](const std::vector<Variable>& in) { return rmsNorm(in[0], Variable(), 1e-3); }, {x}));
  // Strided input.
  EXPECT_TRUE(
      gradientsMatch([](const std::vector<Variable>& in) { return rmsNorm(transpose(in[0], 0, 1), in[1]); },
                     {randomTensor({3, 4}, DType::f64, 4), randomTensor({3}, DType::f64, 5)}));
}

TEST(Activation, gelu_tanh_silu_swiglu_gradients) {
  Tensor x = randomTensor({2, 7}, DType::f64, 6, -3.0, 3.0), u = randomTensor({2, 7}, DType::f64, 7);
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) { return gelu(in[0], GeluApproximation::tanh); }, {x}));
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) { return gelu(in[0], GeluApproximation::none); }, {x}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return silu(in[0]); }, {x}));
  EXPECT_TRUE(gradientsMatch([](const std::vector<Variable>& in) { return swiglu(in[0], in[1]); }, {x, u}));
  // swiglu is silu(gate) * up, in one node.
  Variable a(x.to(DType::f32), false), b(u.to(DType::f32), false);
  EXPECT_TRUE(tensorsNear(swiglu(a, b).tensor(), (silu(a) * b).tensor(), 1e-6, 1e-5));
  // gelu tanh vs erf differ, but by little.
  EXPECT_TRUE(tensorsNear(gelu(a, GeluApproximation::tanh).tensor(), gelu(a).tensor(), 1e-3));
}

TEST(Split, pieces_are_views_and_gradients_flow_back) {
  Tensor x = randomTensor({2, 7, 3}, DType::f64, 8);
  Variable vx(x, false);
  auto pieces = split(vx, 3, 1);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].shape(), (Shape{2, 1, 3}));
  for (const Variable& p : pieces) EXPECT_TRUE(p.tensor().sharesStorage(x));
  auto sized = split(vx, std::vector<int64_t>{1, 2}, -1);
  EXPECT_EQ(sized[1].shape(), (Shape{2, 7, 2}));
  EXPECT_THROW(split(vx, std::vector<int64_t>{1, 1}, 2), ValueError);
  EXPECT_THROW(split(vx, 0, 0), ValueError);
  EXPECT_TRUE(gradientsMatch(
      [](const std::vector<Variable>& in) {
        auto p = split(in[0], 3, 1);
        return concat({p[2] * 2.0, p[0] * p[0], p[1]}, 1);
      },
      {x}));
}

TEST(Views, reshape_transpose_permute_narrow_share_storage) {
  Variable x(randomTensor({2, 3, 4}, DType::f32, 9), true);
  EXPECT_TRUE(reshape(x, {6, 4}).tensor().sharesStorage(x.tensor()));
  EXPECT_TRUE(transpose(x, 0, 2).tensor().sharesStorage(x.tensor()));
  EXPECT_TRUE(permute(x, {2, 0, 1}).tensor().sharesStorage(x.tensor()));
  EXPECT_TRUE(narrow(x, 1, 1, 2).tensor().sharesStorage(x.tensor()));
  // A transposed tensor's reshape must copy (as torch's does); its transpose back need not.
  Variable t = transpose(x, 1, 2);
  EXPECT_FALSE(reshape(t, {2, 12}).tensor().sharesStorage(x.tensor()));
  EXPECT_TRUE(transpose(t, 1, 2).tensor().sharesStorage(x.tensor()));
}

TEST(Rotary, gradient_and_tables_match_llama_convention) {
  auto [c, s] = rotaryTables(5, 8, 10000.0, 3);
  EXPECT_EQ(c.shape(), (Shape{5, 4}));
  // Position 3 + 1 = 4, frequency index 1: theta^(-2/8).
  EXPECT_NEAR(c.toVector<double>()[1 * 4 + 1], std::cos(4.0 * std::pow(10000.0, -0.25)), 1e-6);
  EXPECT_NEAR(s.toVector<double>()[1 * 4 + 1], std::sin(4.0 * std::pow(10000.0, -0.25)), 1e-6);
  Tensor x = randomTensor({1, 2, 5, 8}, DType::f64, 10);
  EXPECT_TRUE(gradientsMatch([&](const std::vector<Variable>& in) { return applyRotary(in[0], c, s); }, {x}));
  // out[..., :D/2] = x1 cos - x2 sin, out[..., D/2:] = x2 cos + x1 sin.
  Variable vx(x, false);
  Tensor y = applyRotary(vx, c, s).tensor();
  auto xv = x.toVector<double>(), yv = y.toVector<double>(), cv = c.toVector<double>(),
       sv = s.toVector<double>();
  const int64_t t = 2, i = 3;  // head 0, position 2, pair 3
  EXPECT_NEAR(yv[t * 8 + i], xv[t * 8 + i] * cv[t * 4 + i] - xv[t * 8 + 4 + i] * sv[t * 4 + i], 1e-6);
  EXPECT_NEAR(yv[t * 8 + 4 + i], xv[t * 8 + 4 + i] * cv[t * 4 + i] + xv[t * 8 + i] * sv[t * 4 + i], 1e-6);
  EXPECT_THROW(rotaryTables(4, 7), ValueError);
}

TEST(ScaledDotProductAttention, gradient_matches_finite_differences) {
  struct Case {
    int64_t b, h, hkv, t, s, d;
    bool causal;
    double dropout;
  };
  for (const Case& c : {Case{1, 1, 1, 5, 5, 4, true, 0.0}, Case{2, 2, 1, 3, 4, 2, false, 0.0},
                        Case{1, 2, 2, 4, 4, 3, true, 0.4}, Case{1, 1, 1, 1, 3, 2, true, 0.0}}) {
    SCOPED_TRACE(std::to_string(c.t) + "x" + std::to_string(c.s) + (c.causal ? " causal" : ""));
    Tensor q = randomTensor({c.b, c.h, c.t, c.d}, DType::f64, 11),
           k = randomTensor({c.b, c.hkv, c.s, c.d}, DType::f64, 12);
    Tensor v = randomTensor({c.b, c.hkv, c.s, c.d}, DType::f64, 13);
    EXPECT_TRUE(gradientsMatch(
        [&](const std::vector<Variable>& in) {
          Generator gen(5);  // the same dropout mask on every evaluation
          return scaledDotProductAttention(in[0], in[1], in[2], {c.causal, c.dropout, std::nullopt}, gen);
        },
        {q, k, v}));
  }
}

TEST(ScaledDotProductAttention, f32_blocked_path_matches_f64_reference_with_gradients) {
  // T = 100 spans two 64-row blocks; GQA 4 query heads on 2 kv heads; dropout 0.2.
  Tensor q = randomTensor({2, 4, 100, 16}, DType::f64, 14), k = randomTensor({2, 2, 100, 16}, DType::f64, 15);
  Tensor v = randomTensor({2, 2, 100, 16}, DType::f64, 16), g = randomTensor({2, 4, 100, 16}, DType::f64, 17);
  auto run = [&](DType dt) {
    Variable vq(q.to(dt), true), vk(k.to(dt), true), vv(v.to(dt), true);
    Generator gen(3);
    Variable y = scaledDotProductAttention(vq, vk, vv, {true, 0.2, 0.3}, gen);
    EXPECT_EQ(gen.offset(), 2u * 4 * 100 * 100);
    y.backward(g.to(dt));
    return std::vector<Tensor>{y.tensor(), vq.grad(), vk.grad(), vv.grad()};
  };
  auto r32 = run(DType::f32), r64 = run(DType::f64);
  for (size_t i = 0; i < r32.size(); ++i) EXPECT_TRUE(tensorsNear(r32[i], r64[i], 1e-4, 1e-3)) << i;
}

TEST(ScaledDotProductAttention, causal_matches_matmul_softmax_matmul) {
  Tensor q = randomTensor({1, 2, 6, 4}, DType::f64, 18), k = randomTensor({1, 2, 6, 4}, DType::f64, 19);
  Tensor v = randomTensor({1, 2, 6, 4}, DType::f64, 20);
  Variable vq(q, false), vk(k, false), vv(v, false);
  Tensor mask = Tensor::zeros({6, 6}, DType::f64);
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = i + 1; j < 6; ++j) mask.narrow(0, i, 1).narrow(1, j, 1).fill(-1e30);
  }
  Variable scores = matmul(vq, transpose(vk, 2, 3)) * 0.5 + Variable(mask, false);
  Variable naive = matmul(softmax(scores, -1), vv);
  EXPECT_TRUE(tensorsNear(scaledDotProductAttention(vq, vk, vv, {true}).tensor(), naive.tensor(), 1e-12));
}

TEST(ScaledDotProductAttention, dropout_is_reproducible_from_the_generator_state) {
  Variable q(randomTensor({1, 2, 9, 4}, DType::f32, 21), false);
  Generator a(42), b(42);
  Tensor ya = scaledDotProductAttention(q, q, q, {false, 0.5}, a).tensor();
  Tensor yb = scaledDotProductAttention(q, q, q, {false, 0.5}, b).tensor();
  EXPECT_TRUE(tensorsNear(ya, yb, 0.0));
  Tensor yc = scaledDotProductAttention(q, q, q, {false, 0.5}, a).tensor();  // the generator moved on
  EXPECT_FALSE(tensorsNear(ya, yc, 1e-6));
  EXPECT_THROW(scaledDotProductAttention(q, q, q, {false, 1.5}), ValueError);
}

// GPT's attention from one fused projection equals the composed ops (split, heads, attention,
// heads merged) in value and in qkv's gradient, with and without dropout and the causal mask, in
// f64 (bitwise) and f32 (to 1e-6: its heads are read in place with the packed row stride, where
// the composed ops copy them, and oneDNN's sgemm may pick its kernel by the leading dimension); its
// gradient is one contiguous [B, T, 3C] tensor; a width that is not 3 whole heads' worth is refused
// by name.
TEST(PackedQkvAttention, equals_the_composed_ops_forward_and_backward) {
  const int64_t b = 2, t = 70, h = 3, d = 8, c = h * d;
  for (DType dt : {DType::f64, DType::f32}) {
    for (auto [causal, dropout] : {std::pair{true, 0.0}, {false, 0.0}, {true, 0.3}}) {
      SCOPED_TRACE(std::string(dtypeName(dt)) + (causal ? " causal" : "") + " p=" + std::to_string(dropout));
      Tensor x = randomTensor({b, t, 3 * c}, dt, 31), g = randomTensor({b, t, c}, dt, 32);
      const AttentionOptions opts{causal, dropout, std::nullopt};
      Variable packed_in(x.clone(), true), composed_in(x.clone(), true);
      Generator ga(7), gb(7);
      Variable packed = packedQkvAttention(packed_in, h, opts, ga);
      std::vector<Variable> parts = split(composed_in, c, 2);
      auto heads = [&](const Variable& v) { return transpose(reshape(v, {b, t, h, d}), 1, 2); };
      Variable composed = reshape(
          transpose(scaledDotProductAttention(heads(parts[0]), heads(parts[1]), heads(parts[2]), opts, gb), 1,
                    2),
          {b, t, c});
      EXPECT_EQ(ga.offset(), gb.offset());
      EXPECT_EQ(packed.shape(), composed.shape());
      const double tol = dt == DType::f64 ? 0.0 : 1e-6;
      EXPECT_TRUE(tensorsNear(packed.tensor(), composed.tensor(), tol, tol));
      packed.backward(g);
      composed.backward(g);
      EXPECT_TRUE(packed_in.grad().isContiguous());
      EXPECT_TRUE(tensorsNear(packed_in.grad(), composed_in.grad(), tol, tol));
    }
  }
  Variable odd(randomTensor({1, 4, 20}, DType::f32, 33), true);
  EXPECT_THROW(packedQkvAttention(odd, 3), ValueError);  // 20 is not 3 x 3 heads' width
}

TEST(Autocast, transformer_ops_follow_the_policy) {
  Variable x(randomTensor({1, 2, 8, 4}, DType::f32, 22), true);
  Variable w(Tensor::ones({4}, DType::f32), true);
  AutocastGuard guard(DType::bf16);
  EXPECT_EQ(scaledDotProductAttention(x, x, x, {true}).dtype(), DType::bf16);
  Variable low = toDType(x, DType::bf16);
  EXPECT_EQ(rmsNorm(low, w).dtype(), DType::f32);
  Variable table(randomTensor({5, 4}, DType::f32, 23), true);
  EXPECT_EQ(embedding(table, Tensor::fromVector<int64_t>({1, 2}, {2})).dtype(), DType::f32);
  EXPECT_EQ(silu(low).dtype(), DType::bf16);
}
