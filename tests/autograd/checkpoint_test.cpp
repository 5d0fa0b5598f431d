// Activation checkpointing (autograd/checkpoint.h): the recomputed backward gives bitwise the
// gradients of a plain one, dropout masks included, under autocast too; parameters inside the
// segment get gradients and fire their ready hooks; the first run keeps no graph.
#include <cstring>

#include "common/check.h"
#include "lockstep/autograd.h"

using namespace lockstep;
using autograd::Variable;
using lockstep::testing::randomTensor;

namespace {

bool bitwiseEqual(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.dataPtr(), cb.dataPtr(), ca.numel() * dtypeSize(ca.dtype())) == 0;
}

struct Mlp {
  Variable w1{randomTensor({32, 16}, DType::f32, 1), true}, b1{randomTensor({32}, DType::f32, 2), true};
  Variable w2{randomTensor({16, 32}, DType::f32, 3), true}, b2{randomTensor({16}, DType::f32, 4), true};
  Generator gen{99};
  // A residual block with dropout from both the default generator and its own.
  Variable operator()(const Variable& x) {
    Variable h = autograd::gelu(autograd::linear(x, w1, b1));
    h = autograd::dropout(h, 0.3, true);
    h = autograd::linear(h, w2, b2);
    h = autograd::dropout(h, 0.2, true, gen);
    return x + h;
  }
  std::vector<Variable> params() const { return {w1, b1, w2, b2}; }
};

struct Grads {
  std::vector<Tensor> g;
  Tensor out;
};

// Three blocks, each its own segment; shared: one block's weights used by all three.
Grads run(bool use_checkpoint, std::optional<DType> autocast_dtype, bool shared) {
  manualSeed(5);
  std::vector<Mlp> blocks(shared ? 1 : 3);
  Variable x(randomTensor({8, 16}, DType::f32, 7), true);
  auto body = [&](const Variable& in) {
    Variable h = in;
    for (int layer = 0; layer < 3; ++layer) {
      Mlp& block = blocks[shared ? 0 : layer];
      if (use_checkpoint) {
        h = autograd::checkpoint([&](const std::vector<Variable>& v) { return block(v[0]); }, {h},
                                 {.generators = {&block.gen}});
      } else {
        h = block(h);
      }
      h = autograd::dropout(h, 0.1, true);  // outside the segments: advances the default generator
    }
    return h;
  };
  Variable y;
  if (autocast_dtype) {
    autograd::AutocastGuard guard(*autocast_dtype);
    y = body(x);
  } else {
    y = body(x);
  }
  Variable loss = autograd::sum(autograd::mul(y, y));
  loss.backward();
  Grads r;
  r.out = y.tensor();
  r.g.push_back(x.grad());
  for (const Mlp& b : blocks) {
    for (const Variable& p : b.params()) r.g.push_back(p.grad());
  }
  return r;
}

}  // namespace

TEST(Checkpoint, backward_is_bitwise_the_plain_backward_with_dropout) {
  for (bool shared : {false, true}) {
    Grads plain = run(false, std::nullopt, shared), ck = run(true, std::nullopt, shared);
    EXPECT_TRUE(bitwiseEqual(plain.out, ck.out));
    ASSERT_EQ(plain.g.size(), ck.g.size());
    for (size_t i = 0; i < plain.g.size(); ++i) {
      ASSERT_TRUE(ck.g[i].defined()) << "gradient " << i << " missing";
      EXPECT_TRUE(bitwiseEqual(plain.g[i], ck.g[i])) << "gradient " << i << " differs, shared " << shared;
    }
  }
}

// Bitwise when each segment has its own parameters (a transformer's blocks). A parameter shared by
// several segments is cast once per segment instead of once per forward, so its bf16 gradients
// are summed in f32 rather than in bf16: close, not bitwise.
TEST(Checkpoint, backward_is_bitwise_the_plain_backward_under_bf16_autocast) {
  Grads plain = run(false, DType::bf16, false), ck = run(true, DType::bf16, false);
  EXPECT_TRUE(bitwiseEqual(plain.out, ck.out));
  for (size_t i = 0; i < plain.g.size(); ++i)
    EXPECT_TRUE(bitwiseEqual(plain.g[i], ck.g[i])) << "gradient " << i;
}

TEST(Checkpoint, parameters_inside_fire_their_ready_hooks_once) {
  Variable w(randomTensor({4, 4}, DType::f32, 1), true);
  int fired = 0;
  w.registerGradReadyHook([&](Variable&) { ++fired; });
  Variable x(randomTensor({2, 4}, DType::f32, 2));  // no input requires a gradient
  Variable y = autograd::checkpoint(
      [&](const std::vector<Variable>& v) { return autograd::linear(v[0], w, {}); }, {x});
  autograd::sum(y).backward();
  EXPECT_EQ(fired, 1);
  ASSERT_TRUE(w.hasGrad());
}

TEST(Checkpoint, runs_plainly_without_gradients_and_profiles_otherwise) {
  autograd::resetCheckpointProfile();
  Variable w(randomTensor({4, 4}, DType::f32, 1), true);
  auto seg = [&](const std::vector<Variable>& v) { return autograd::linear(v[0], w, {}); };
  {
    autograd::NoGradGuard no_grad;
    Variable y = autograd::checkpoint(seg, {Variable(randomTensor({2, 4}, DType::f32, 2))});
    EXPECT_FALSE(y.requiresGrad());
  }
  EXPECT_EQ(autograd::checkpointProfile().segments, 0);
  Variable y = autograd::checkpoint(seg, {Variable(randomTensor({2, 4}, DType::f32, 2), true)});
  EXPECT_EQ(y.gradFn()->name(), "CheckpointBackward");
  autograd::sum(y).backward();
  auto p = autograd::checkpointProfile();
  EXPECT_EQ(p.segments, 1);
  EXPECT_EQ(p.recomputes, 1);
  EXPECT_GE(p.forward_seconds, 0.0);
}
