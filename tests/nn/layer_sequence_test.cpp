// The zoo's models as layer sequences (what a pipeline cuts into stages): running the layers in
// order is bitwise the model's forward, the layers share the model's parameters, and tied
// parameters are found.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "lockstep/kernels/threads.h"
#include "lockstep/nn.h"

using namespace lockstep;
using namespace lockstep::nn;

namespace {

Tensor randomInput(const Shape& shape) {
  Generator gen(7);
  Tensor t = Tensor::empty(shape);
  gen.normal(t, 0.0, 1.0);
  return t;
}

Tensor tokens(int64_t batch, int64_t time, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < batch * time; ++i) ids.push_back((i * 31 + 7) % vocab);
  return Tensor::fromVector<int64_t>(ids, {batch, time});
}

// Small problems: one intra-op thread avoids OpenMP barriers that dominate on a loaded machine.
struct OneThread {
  int prev = kernels::numThreads();
  OneThread() { kernels::setNumThreads(1); }
  ~OneThread() { kernels::setNumThreads(prev); }
};

bool bitwiseEqual(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data<float>(), y.data<float>(), static_cast<size_t>(x.numel()) * sizeof(float)) == 0;
}

// The sequence's output against the model's, on the same input and the same random draws.
void expectSameForward(Module& model, const Tensor& input, bool training) {
  model.train(training);
  LayerSequence seq = layerSequence(model);
  ASSERT_GE(seq.size(), 3u) << model.typeName();
  for (auto& layer : seq.layers) layer->train(training);
  manualSeed(11);
  Tensor expected = model.forward(Variable(input)).tensor();
  manualSeed(11);
  Tensor got = seq.forward(Variable(input)).tensor();
  EXPECT_TRUE(bitwiseEqual(expected.to(DType::f32), got.to(DType::f32))) << model.typeName();
  // Split anywhere, the halves compose to the whole.
  manualSeed(11);
  const size_t cut = seq.size() / 2;
  Tensor halves = seq.forward(seq.forward(Variable(input), 0, cut), cut).tensor();
  EXPECT_TRUE(bitwiseEqual(expected.to(DType::f32), halves.to(DType::f32))) << model.typeName();
}

int64_t sequenceParameters(const LayerSequence& seq) {
  int64_t n = 0;
  for (auto& l : seq.layers) n += l->numParameters();
  return n;
}

}  // namespace

TEST(LayerSequence, small_cnns_run_as_their_layers) {
  manualSeed(1);
  auto mnist = makeModel("mnist_cnn");
  expectSameForward(*mnist, randomInput({2, 1, 28, 28}), true);
  LayerSequence seq = layerSequence(*mnist);
  EXPECT_EQ(seq.names, (std::vector<std::string>{"conv1", "conv2", "conv3", "dense1", "dense2"}));
  EXPECT_EQ(sequenceParameters(seq), mnist->numParameters());
  EXPECT_TRUE(seq.tied.empty());
  auto cifar = makeModel("cifar_cnn");
  expectSameForward(*cifar, randomInput({2, 3, 32, 32}), true);
  EXPECT_EQ(layerSequence(*cifar).names[3], "linear1");
}

TEST(LayerSequence, resnets_run_as_stem_blocks_and_head) {
  OneThread one_thread;
  manualSeed(2);
  auto r18 = makeModel("resnet18_cifar");
  // Small images keep it fast: the adaptive pool takes any size.
  expectSameForward(*r18, randomInput({2, 3, 8, 8}), true);
  LayerSequence seq = layerSequence(*r18);
  ASSERT_EQ(seq.size(), 10u);  // stem, 8 BasicBlocks, head
  EXPECT_EQ(seq.names[1], "layer1.0");
  EXPECT_EQ(seq.layers[1]->typeName(), "BasicBlock");
  EXPECT_EQ(seq.names[9], "head");
  EXPECT_EQ(sequenceParameters(seq), r18->numParameters());
  // The layers hold the model's own parameters.
  EXPECT_EQ(seq.layers[0]->parameters()[0].impl(), r18->parameters()[0].impl());

  auto imagenet18 = makeModel("resnet18", {.num_classes = 10});
  expectSameForward(*imagenet18, randomInput({1, 3, 32, 32}), false);
  EXPECT_EQ(layerSequence(*imagenet18).size(), 10u);
  // ResNet-50's stem and head are ResNet-18's; its blocks run as themselves.
  auto r50 = makeModel("resnet50", {.num_classes = 10});
  LayerSequence seq50 = layerSequence(*r50);
  EXPECT_EQ(seq50.size(), 18u);  // stem, 3 + 4 + 6 + 3 Bottlenecks, head
  EXPECT_EQ(seq50.layers[5]->typeName(), "Bottleneck");
  EXPECT_EQ(sequenceParameters(seq50), r50->numParameters());
}

TEST(LayerSequence, gpt_runs_as_embedding_blocks_and_tied_head) {
  manualSeed(3);
  auto gpt = makeModel("gpt", {.model_type = "gpt-nano", .vocab_size = 64, .block_size = 16});
  const Tensor idx = tokens(2, 16, 64);
  expectSameForward(*gpt, idx, false);
  expectSameForward(*gpt, idx, true);  // dropout: the same masks from the same seed
  LayerSequence seq = layerSequence(*gpt);
  ASSERT_EQ(seq.size(), 5u);  // embedding, 3 blocks, head
  EXPECT_EQ(seq.names.front(), "embedding");
  EXPECT_EQ(seq.names[1], "transformer.h.0");
  EXPECT_EQ(seq.names.back(), "head");
  // The output layer is the token embedding: one tied parameter, on the first and last layer.
  ASSERT_EQ(seq.tied.size(), 1u);
  EXPECT_EQ(seq.tied[0].name, "transformer.wte.weight");
  EXPECT_EQ(seq.tied[0].layers, (std::vector<size_t>{0, 4}));
  // The pieces made for the sequence start in the model's mode.
  gpt->eval();
  EXPECT_FALSE(layerSequence(*gpt).layers.front()->isTraining());
}

TEST(LayerSequence, llama_blocks_make_their_own_rotary_tables) {
  manualSeed(4);
  auto llama = makeModel("llama", {.model_type = "llama-tiny", .vocab_size = 64, .block_size = 32});
  const Tensor idx = tokens(2, 12, 64);
  expectSameForward(*llama, idx, true);
  LayerSequence seq = layerSequence(*llama);
  ASSERT_EQ(seq.size(), 6u);  // embedding, 4 blocks, head
  EXPECT_EQ(seq.layers[1]->typeName(), "LlamaDecoderLayer");
  EXPECT_TRUE(seq.tied.empty());  // lm_head is untied
  EXPECT_EQ(sequenceParameters(seq), llama->numParameters());
}

TEST(LayerSequence, sequential_is_its_modules_and_other_models_are_refused) {
  auto mlp = makeModel("mlp");
  EXPECT_EQ(layerSequence(*mlp).size(), 4u);  // Flatten, Linear, ReLU, Linear
  auto linear = makeModel("linear");
  try {
    layerSequence(*linear);
    FAIL() << "a Linear model has no layer sequence";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("model Linear has no layer sequence"), std::string::npos)
        << e.what();
  }
}
