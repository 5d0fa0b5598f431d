// Module: registration, naming, modes, state dicts and strict-load error messages.
#include <gtest/gtest.h>

#include "common/check.h"
#include "lockstep/nn.h"

using namespace lockstep;
using namespace lockstep::nn;

namespace {

class Block : public Module {
 public:
  Block() : Module("Block") {
    fc = registerModule("fc", std::make_shared<Linear>(LinearOptions{3, 4}));
    bn = registerModule("bn", std::make_shared<BatchNorm2d>(BatchNorm2dOptions{4}));
    scale = registerParameter("scale", Tensor::ones({4}));
  }
  std::shared_ptr<Linear> fc;
  std::shared_ptr<BatchNorm2d> bn;
  Variable scale;
};

class Net : public Module {
 public:
  Net() : Module("Net") {
    alpha = registerParameter("alpha", Tensor::zeros({2}));
    registerBuffer("steps", Tensor::scalar(0, DType::i64));
    block = registerModule("block", std::make_shared<Block>());
    head = registerModule("head", std::make_shared<Linear>(LinearOptions{4, 2, false}));
    drop = registerModule("drop", std::make_shared<Dropout>());
  }
  std::shared_ptr<Block> block;
  std::shared_ptr<Linear> head;
  std::shared_ptr<Dropout> drop;
  Variable alpha;
};

std::vector<std::string> names(const std::vector<std::pair<std::string, Variable>>& v) {
  std::vector<std::string> out;
  for (auto& [n, p] : v) out.push_back(n);
  return out;
}

}  // namespace

TEST(Module, parameters_are_named_recursively_in_registration_order) {
  Net net;
  EXPECT_EQ(names(net.namedParameters()),
            (std::vector<std::string>{"alpha", "block.scale", "block.fc.weight", "block.fc.bias",
                                      "block.bn.weight", "block.bn.bias", "head.weight"}));
  EXPECT_EQ(names(net.namedParameters(false)), (std::vector<std::string>{"alpha"}));
  EXPECT_EQ(net.numParameters(), 2 + 4 + 12 + 4 + 4 + 4 + 8);
  EXPECT_EQ(net.parameters().size(), 7u);
  for (auto& p : net.parameters()) EXPECT_TRUE(p.requiresGrad() && p.isLeaf());
  std::vector<std::string> buffers;
  for (auto& [n, b] : net.namedBuffers()) buffers.push_back(n);
  EXPECT_EQ(buffers, (std::vector<std::string>{"steps", "block.bn.running_mean", "block.bn.running_var",
                                               "block.bn.num_batches_tracked"}));
  ASSERT_EQ(net.children().size(), 3u);
  EXPECT_EQ(net.namedChildren()[0].first, "block");
  EXPECT_EQ(net.child("head")->typeName(), "Linear");
  EXPECT_THROW(net.child("nope"), ValueError);
  auto mods = net.namedModules();
  ASSERT_EQ(mods.size(), 6u);
  EXPECT_EQ(mods[2].first, "block.fc");
}

TEST(Module, state_dict_lists_parameters_then_buffers_per_module) {
  Net net;
  EXPECT_EQ(
      net.stateDict().keys(),
      (std::vector<std::string>{"alpha", "steps", "block.scale", "block.fc.weight", "block.fc.bias",
                                "block.bn.weight", "block.bn.bias", "block.bn.running_mean",
                                "block.bn.running_var", "block.bn.num_batches_tracked", "head.weight"}));
  EXPECT_EQ(net.stateDict().at("block.bn.num_batches_tracked").dtype(), DType::i64);
  EXPECT_EQ(net.stateDict().at("block.bn.num_batches_tracked").dim(), 0);
  // Entries alias the live tensors.
  EXPECT_TRUE(net.stateDict().at("alpha").sharesStorage(net.alpha.tensor()));
}

TEST(Module, duplicate_or_dotted_names_are_rejected) {
  struct Bad : Module {
    explicit Bad(int which) : Module("Bad") {
      registerParameter("w", Tensor::zeros({1}));
      if (which == 0) registerParameter("w", Tensor::zeros({1}));
      if (which == 1) registerBuffer("w", Tensor::zeros({1}));
      if (which == 2) registerModule("w", std::make_shared<ReLU>());
      if (which == 3) registerParameter("a.b", Tensor::zeros({1}));
      if (which == 4) registerModule("x", std::shared_ptr<Module>());
    }
  };
  for (int i = 0; i < 5; ++i) EXPECT_THROW(Bad{i}, ValueError) << i;
}

TEST(Module, train_and_eval_propagate) {
  Net net;
  EXPECT_TRUE(net.isTraining());
  net.eval();
  EXPECT_FALSE(net.isTraining());
  EXPECT_FALSE(net.block->bn->isTraining());
  EXPECT_FALSE(net.drop->isTraining());
  net.train();
  EXPECT_TRUE(net.block->fc->isTraining());
}

TEST(Module, zero_grad_clears_or_zero_fills) {
  Net net;
  for (auto& p : net.parameters()) p.setGrad(Tensor::ones(p.shape()));
  net.zeroGrad(false);
  for (auto& p : net.parameters()) {
    ASSERT_TRUE(p.hasGrad());
    for (double v : p.grad().toVector<double>()) EXPECT_EQ(v, 0.0);
  }
  net.zeroGrad();
  for (auto& p : net.parameters()) EXPECT_FALSE(p.hasGrad());
}

TEST(Module, state_dict_round_trip) {
  manualSeed(1);
  Net a;
  manualSeed(2);
  Net b;
  ASSERT_NE(a.block->fc->weight().tensor().toVector<float>(),
            b.block->fc->weight().tensor().toVector<float>());
  a.block->bn->runningMean().fill(0.25);
  Tensor(a.stateDict().at("block.bn.num_batches_tracked")).fill(7);
  Tensor b_weight = b.block->fc->weight().tensor();
  b.loadStateDict(a.stateDict().cloned());
  EXPECT_EQ(a.block->fc->weight().tensor().toVector<float>(),
            b.block->fc->weight().tensor().toVector<float>());
  EXPECT_TRUE(b.block->fc->weight().tensor().sharesStorage(b_weight));  // loaded in place
  EXPECT_EQ(b.block->bn->runningMean().toVector<float>(), std::vector<float>(4, 0.25f));
  EXPECT_EQ(b.block->bn->numBatchesTracked(), 7);
  for (const auto& [name, t] : a.stateDict()) {
    EXPECT_EQ(t.toVector<double>(), b.stateDict().at(name).toVector<double>()) << name;
  }
}

TEST(Module, strict_load_lists_every_missing_unexpected_and_mismatched_name) {
  Net net;
  StateDict sd = net.stateDict().cloned();
  sd.erase("alpha");
  sd.erase("block.bn.running_var");
  sd.insert("extra.weight", Tensor::zeros({1}));
  sd.insert("block.other", Tensor::zeros({1}));
  StateDict fixed;
  for (const auto& [n, t] : sd)
    fixed.insert(n, n == "head.weight"   ? Tensor::zeros({3, 4})
                    : n == "block.scale" ? Tensor::zeros({4}, DType::i32)  // integers for a float tensor
                                         : t);
  try {
    net.loadStateDict(fixed);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing key(s): \"alpha\", \"block.bn.running_var\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected key(s): \"extra.weight\", \"block.other\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("size mismatch for head.weight: checkpoint has shape [3, 4], the model has [2, 4]"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("dtype mismatch for block.scale: checkpoint has dtype i32, the model has f32"),
              std::string::npos)
        << msg;
  }
  // Nothing was copied by the failed load.
  EXPECT_EQ(net.head->weight().tensor().toVector<float>(),
            net.stateDict().at("head.weight").toVector<float>());
  // Non-strict: missing and unexpected keys are skipped, but a shape mismatch still fails.
  EXPECT_THROW(net.loadStateDict(fixed, false), ValueError);
  Tensor(sd.at("block.scale")).fill(3.0);
  net.loadStateDict(sd, false);
  EXPECT_EQ(net.block->scale.tensor().toVector<float>(), std::vector<float>(4, 3.0f));
}

TEST(Module, to_casts_parameters_and_floating_buffers) {
  Net net;
  net.to(DType::f64);
  for (auto& p : net.parameters()) EXPECT_EQ(p.dtype(), DType::f64);
  EXPECT_EQ(net.block->bn->runningMean().dtype(), DType::f64);
  EXPECT_EQ(net.stateDict().at("block.bn.num_batches_tracked").dtype(), DType::i64);
}

TEST(Module, sequential_names_children_by_index) {
  Sequential seq({std::make_shared<Linear>(LinearOptions{2, 3}), std::make_shared<ReLU>(),
                  std::make_shared<Linear>(LinearOptions{3, 1})});
  EXPECT_EQ(names(seq.namedParameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_EQ(seq[1]->typeName(), "ReLU");
  EXPECT_THROW(seq[3], ValueError);
  EXPECT_NE(seq.describe().find("(2): Linear(in_features=3, out_features=1, bias=true)"), std::string::npos)
      << seq.describe();
}

TEST(Module, base_forward_is_not_supported) {
  struct Empty : Module {
    Empty() : Module("Empty") {}
  } m;
  EXPECT_THROW(m.forward(Variable(Tensor::zeros({1}))), NotSupportedError);
}
