// kernels/fusions.h: each fused composition turned off (LOCKSTEP_DISABLE_FUSIONS, or
// setFusionEnabled) takes the composed ops it replaces, with the same values and gradients; the
// variable names fusions and refuses an unknown one by name.
#include "lockstep/kernels/fusions.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "common/check.h"
#include "lockstep/autograd.h"

using namespace lockstep;
using namespace lockstep::autograd;
using kernels::Fusion;
using lockstep::testing::randomTensor;
using lockstep::testing::tensorsNear;

namespace {

// Turns f off for its scope.
class FusionOff {
 public:
  explicit FusionOff(Fusion f) : f_(f) { kernels::setFusionEnabled(f_, false); }
  ~FusionOff() { kernels::setFusionEnabled(f_, true); }
  FusionOff(const FusionOff&) = delete;
  FusionOff& operator=(const FusionOff&) = delete;

 private:
  Fusion f_;
};

struct OpRun {
  std::string node;  // the output's backward node
  Tensor out;
  std::vector<Tensor> grads;
};

// op on fresh leaves of `inputs`, its output's node, value and the leaves' gradients for g.
OpRun runOp(const std::function<Variable(const std::vector<Variable>&)>& op,
            const std::vector<Tensor>& inputs, const Tensor& g) {
  std::vector<Variable> leaves;
  for (const Tensor& t : inputs) leaves.emplace_back(t.clone(), true);
  Variable y = op(leaves);
  OpRun r{y.gradFn() ? y.gradFn()->name() : "", y.tensor(), {}};
  y.backward(g);
  for (const Variable& v : leaves) r.grads.push_back(v.hasGrad() ? v.grad() : Tensor());
  return r;
}

void expectSame(const OpRun& fused, const OpRun& composed, double tol) {
  EXPECT_TRUE(tensorsNear(fused.out, composed.out, tol, tol));
  ASSERT_EQ(fused.grads.size(), composed.grads.size());
  for (size_t i = 0; i < fused.grads.size(); ++i) {
    ASSERT_EQ(fused.grads[i].defined(), composed.grads[i].defined()) << "input " << i;
    if (fused.grads[i].defined()) {
      EXPECT_TRUE(tensorsNear(fused.grads[i], composed.grads[i], tol, tol)) << "input " << i;
    }
  }
}

}  // namespace

TEST(Fusions, packed_qkv_attention_off_takes_the_composed_attention) {
  const std::vector<Tensor> in{randomTensor({2, 9, 3 * 12}, DType::f32, 1)};
  const Tensor g = randomTensor({2, 9, 12}, DType::f32, 2);
  auto op = [](const std::vector<Variable>& v) { return packedQkvAttention(v[0], 3, {.causal = true}); };
  const OpRun fused = runOp(op, in, g);
  EXPECT_EQ(fused.node, "PackedQkvAttentionBackward");
  OpRun composed;
  {
    FusionOff off(Fusion::packed_qkv_attention);
    EXPECT_FALSE(kernels::fusionEnabled(Fusion::packed_qkv_attention));
    composed = runOp(op, in, g);
  }
  EXPECT_TRUE(kernels::fusionEnabled(Fusion::packed_qkv_attention));
  EXPECT_EQ(composed.node, "ReshapeBackward");  // the heads merged after scaledDotProductAttention
  expectSame(fused, composed, 1e-6);
}

TEST(Fusions, residual_epilogue_off_adds_after_the_projection) {
  const std::vector<Tensor> in{
      randomTensor({2, 5, 8}, DType::f32, 3), randomTensor({16, 8}, DType::f32, 4),
      randomTensor({16}, DType::f32, 5),      randomTensor({8, 16}, DType::f32, 6),
      randomTensor({8}, DType::f32, 7),       randomTensor({2, 5, 8}, DType::f32, 8)};
  const Tensor g = randomTensor({2, 5, 8}, DType::f32, 9);
  auto proj = [](const std::vector<Variable>& v) {
    return linearResidual(v[5], v[0], narrow(v[3], 1, 0, 8), v[4]);
  };
  auto mlp = [](const std::vector<Variable>& v) { return geluMlp(v[0], v[1], v[2], v[3], v[4], v[5]); };
  for (const auto& [name, op, node] : {std::tuple{"linearResidual", std::function(proj), "LinearBackward"},
                                       std::tuple{"geluMlp", std::function(mlp), "GeluMlpBackward"}}) {
    SCOPED_TRACE(name);
    const OpRun fused = runOp(op, in, g);
    EXPECT_EQ(fused.node, node);
    OpRun composed;
    {
      FusionOff off(Fusion::residual_epilogue);
      composed = runOp(op, in, g);
    }
    EXPECT_EQ(composed.node, "AddBackward");
    expectSame(fused, composed, 1e-6);
  }
}

TEST(Fusions, loss_with_grad_off_gives_the_same_loss_and_gradients) {
  // On the CPU both take the forward, then the backward (the one-pass kernel is a GPU's); the switch
  // must leave them as they are. test_kernels_gpu's GpuLinearCrossEntropy compares the two on a GPU.
  const std::vector<Tensor> in{randomTensor({12, 8}, DType::f32, 10), randomTensor({21, 8}, DType::f32, 11)};
  const Tensor target = Tensor::fromVector<int64_t>({0, 3, 20, 7, 7, 1, 2, 19, 5, 11, 13, 4}, {12});
  auto op = [&](const std::vector<Variable>& v) { return linearCrossEntropy(v[0], v[1], target); };
  const Tensor g = Tensor::ones({}, DType::f32);
  const OpRun fused = runOp(op, in, g);
  OpRun composed;
  {
    FusionOff off(Fusion::loss_with_grad);
    composed = runOp(op, in, g);
  }
  expectSame(fused, composed, 0.0);
}

// LOCKSTEP_DISABLE_FUSIONS is read once per process: each case runs in a process of its own (a
// death test's re-run of this program).
TEST(Fusions, the_variable_names_fusions_and_refuses_an_unknown_one) {
  EXPECT_EQ(kernels::fusionName(Fusion::packed_qkv_attention), "packed_qkv_attention");
  EXPECT_EQ(kernels::fusionName(Fusion::residual_epilogue), "residual_epilogue");
  EXPECT_EQ(kernels::fusionName(Fusion::loss_with_grad), "loss_with_grad");
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto states = [] {
    try {
      std::fprintf(stderr, "on: %d %d %d\n", kernels::fusionEnabled(Fusion::packed_qkv_attention),
                   kernels::fusionEnabled(Fusion::residual_epilogue),
                   kernels::fusionEnabled(Fusion::loss_with_grad));
      std::exit(0);
    } catch (const ValueError& e) {
      std::fprintf(stderr, "ValueError: %s\n", e.what());
      std::exit(3);
    }
  };
  ASSERT_EQ(setenv("LOCKSTEP_DISABLE_FUSIONS", "residual_epilogue, loss_with_grad", 1), 0);
  EXPECT_EXIT(states(), ::testing::ExitedWithCode(0), "on: 1 0 0");
  ASSERT_EQ(setenv("LOCKSTEP_DISABLE_FUSIONS", "", 1), 0);
  EXPECT_EXIT(states(), ::testing::ExitedWithCode(0), "on: 1 1 1");
  ASSERT_EQ(setenv("LOCKSTEP_DISABLE_FUSIONS", "packed_qkv_attention,gelu", 1), 0);
  EXPECT_EXIT(states(), ::testing::ExitedWithCode(3),
              "LOCKSTEP_DISABLE_FUSIONS='packed_qkv_attention,gelu': no fusion is called 'gelu'; the "
              "fusions lockstep can turn off are packed_qkv_attention, residual_epilogue, loss_with_grad");
  unsetenv("LOCKSTEP_DISABLE_FUSIONS");
}
