// One-process model parallelism (nn/layer_placement.h): a model's layers on devices of their own,
// activations moved between them. This machine has only the CPU, so the tests check the placement
// bookkeeping, that forward and backward are the model's own bit for bit, the mode reaching every
// layer, and the refusals; moving between GPUs runs where there are GPUs.
#include <gtest/gtest.h>

#include <cstring>

#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/util/error.h"

using namespace lockstep;
using namespace lockstep::nn;

namespace {

Tensor tokens(int64_t batch, int64_t time, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < batch * time; ++i) ids.push_back((i * 31 + 7) % vocab);
  return Tensor::fromVector<int64_t>(ids, {batch, time});
}

bool bitwiseEqual(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.dataPtr(), y.dataPtr(), static_cast<size_t>(x.nbytes())) == 0;
}

ModelOptions gptNano() {
  ModelOptions o;
  o.model_type = "gpt-nano";
  o.block_size = 16;
  o.dropout = 0.1;
  return o;
}

}  // namespace

TEST(PlacedLayers, forward_and_backward_are_the_models_own_with_every_layer_where_it_was_put) {
  Generator g1(3), g2(3);
  ModelOptions o = gptNano();
  o.generator = &g1;
  auto reference = makeModel("gpt", o);
  o.generator = &g2;
  auto placed_model = makeModel("gpt", o);
  const size_t layers = layerSequence(*placed_model).size();  // embedding, 3 blocks, head
  ASSERT_EQ(layers, 5u);
  // The embedding and the head share the token embedding: they go on one device.
  PlacedLayers placed(placed_model, {0, 2, 5}, {Device::cpu(), Device::cpu()});
  EXPECT_EQ(placed.numLayers(), 5u);
  for (size_t l = 0; l < layers; ++l) EXPECT_EQ(placed.deviceOf(l), Device::cpu());
  EXPECT_EQ(placed.parameters().size(), reference->parameters().size());
  for (const auto& p : placed.parameters()) EXPECT_EQ(p.tensor().device(), Device::cpu());
  const Tensor x = tokens(2, 16, 256);
  for (bool training : {true, false}) {
    reference->train(training);
    placed.train(training);
    manualSeed(5);
    Variable a = reference->forward(Variable(x));
    manualSeed(5);
    Variable b = placed(Variable(x));
    EXPECT_TRUE(bitwiseEqual(a.tensor(), b.tensor())) << "training " << training;
    if (!training) continue;
    autograd::sum(a).backward();
    autograd::sum(b).backward();
    const auto pa = reference->namedParameters(), pb = placed_model->namedParameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i)
      EXPECT_TRUE(bitwiseEqual(pa[i].second.grad(), pb[i].second.grad())) << pa[i].first;
  }
  // The state dict is the model's, under "model.".
  EXPECT_EQ(placed.stateDict().size(), reference->stateDict().size());
}

TEST(PlacedLayers, refuses_cuts_that_do_not_fit_and_devices_that_are_not_there) {
  auto model = makeModel("mlp", {});
  const int64_t n = static_cast<int64_t>(layerSequence(*model).size());
  EXPECT_THROW(PlacedLayers(model, {0, n}, {Device::cpu(), Device::cpu()}), ValueError);
  EXPECT_THROW(PlacedLayers(model, {0, 1}, {Device::cpu()}), ValueError);
  EXPECT_THROW(PlacedLayers(model, {0, 0, n}, {Device::cpu(), Device::cpu()}), ValueError);
  if (cudaDeviceCount() == 0) {
    try {
      PlacedLayers(model, {0, 1, n}, {Device::cpu(), Device::cuda(0)});
      FAIL() << "cuda:0 on a machine without a GPU";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(PlacedLayers(makeModel("linear", {}), {0, 1}, {Device::cpu()}), ValueError);
}
