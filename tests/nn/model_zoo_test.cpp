// The model zoo: names, parameter counts and order (checked with torch 1.13), and forward outputs
// against torch 1.13 for parameters set by a formula (tests/nn/torch_reference.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "common/check.h"
#include "lockstep/kernels/conv.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/nn.h"

using namespace lockstep;
using namespace lockstep::nn;

namespace {

// These problems are tiny: one intra-op thread avoids OpenMP barriers that dominate on a loaded
// machine (the kernels' own suites cover the threaded paths).
struct OneThread {
  int prev = kernels::numThreads();
  OneThread() { kernels::setNumThreads(1); }
  ~OneThread() { kernels::setNumThreads(prev); }
};

// The formula of torch_reference.py: parameter k, element j = s * sin(2.3 j + k), s = sqrt(6 / fan_in)
// for weights of 2+ dims and 0.01 otherwise; batch-norm weights 1 + that.
void setParams(Module& m) {
  int k = 0;
  for (auto& [name, p] : m.namedParameters()) {
    const int64_t n = p.numel();
    const double scale =
        p.dim() >= 2 ? std::sqrt(6.0 * static_cast<double>(p.size(0)) / static_cast<double>(n)) : 0.01;
    const bool bn_weight = (name.find(".bn") != std::string::npos || name.rfind("bn", 0) == 0 ||
                            name.find("downsample.1") != std::string::npos) &&
                           name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      v[static_cast<size_t>(j)] =
          scale * std::sin(2.3 * static_cast<double>(j) + k) + (bn_weight ? 1.0 : 0.0);
    }
    Tensor t = p.tensor();
    t.copyFrom(Tensor::fromVector<double>(v, p.shape()));
    ++k;
  }
}

Tensor input(const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shapeNumel(shape)));
  for (size_t j = 0; j < v.size(); ++j)
    v[j] = std::cos(0.11 * static_cast<double>(j)) + 0.5 * std::sin(1.3 * static_cast<double>(j));
  return Tensor::fromVector<double>(v, shape).to(DType::f32);
}

// torch 1.13 logits [2, 10] for the formula parameters and input above.
const std::vector<double> kTorchMnistCnn = {
    0.051846154034137726, -0.07417565584182739,  0.0769939124584198,    -0.06016812473535538,
    0.03022134304046631,  0.0030639376491308212, -0.031099911779165268, 0.0494539774954319,
    -0.05790349841117859, 0.05813847482204437,   0.07249290496110916,   -0.09219587594270706,
    0.08872318267822266,  -0.06322132050991058,  0.023977570235729218,  0.017334986478090286,
    -0.05049622058868408, 0.0700313001871109,    -0.07547744363546371,  0.06913534551858902};
const std::vector<double> kTorchCifarCnn = {
    0.031859178096055984,  -0.051324985921382904,  0.05592627078294754,  -0.04516757279634476,
    0.024338271468877792,  -0.0013667959719896317, -0.0172563586384058,  0.029012706130743027,
    -0.035021234303712845, 0.037468358874320984,   0.0343875028192997,   -0.054648201912641525,
    0.059368591755628586,  -0.048029012978076935,  0.026036951690912247, -0.001557283103466034,
    -0.018612796440720558, 0.03164023533463478,    -0.0383855439722538,  0.0408853180706501};
const std::vector<double> kTorchResnetEval = {
    0.07636161893606186,  -0.17421971261501312, 0.23180069029331207,  -0.23168815672397614,
    0.171474426984787,    -0.06596933305263519, -0.05653832480311394, 0.16295747458934784,
    -0.22569230198860168, 0.23054130375385284,  0.07531841099262238,  -0.17371928691864014,
    0.2319640815258026,   -0.23247581720352173, 0.17269575595855713,  -0.06732838600873947,
    -0.05537071079015732, 0.1622641235589981,   -0.22564095258712769, 0.23114444315433502};
const std::vector<double> kTorchResnetTrain = {
    0.0629676952958107,  -0.20887957513332367, 0.3061199188232422,    -0.3276662230491638,
    0.26586592197418213, -0.13591237366199493, -0.027983885258436203, 0.18270763754844666,
    -0.2889634370803833, 0.32200902700424194,  -0.06399960070848465,  -0.0712142065167427,
    0.19109895825386047, -0.26314806938171387, 0.26747632026672363,   -0.20326164364814758,
    0.08879238367080688, 0.04478789120912552,  -0.1633041948080063,   0.23904509842395782};
// torch 1.13: layer1.0.bn1.running_mean[:4] after that one training forward.
const std::vector<double> kTorchResnetRunningMean = {-0.00451807351782918, -0.0014998255064710975,
                                                     0.0027783529367297888, 0.004722569137811661};

std::vector<std::string> paramNames(const Module& m) {
  std::vector<std::string> out;
  for (auto& [n, p] : m.namedParameters()) out.push_back(n);
  return out;
}

}  // namespace

TEST(ModelZoo, parameter_counts_match_torch) {
  // Counts from torch 1.13 for the same definitions (tests/nn/torch_reference.py).
  EXPECT_EQ(makeModel("mnist_cnn")->numParameters(), 93322);
  EXPECT_EQ(makeModel("cifar_cnn")->numParameters(), 122570);
  EXPECT_EQ(makeModel("resnet18_cifar")->numParameters(), 11173962);
  EXPECT_EQ(makeModel("linear")->numParameters(), 21);
  EXPECT_EQ(makeModel("linear", ModelOptions{.in_features = 5, .out_features = 2})->numParameters(), 12);
  EXPECT_EQ(
      makeModel("mlp", ModelOptions{.in_features = 10, .out_features = 3, .hidden = {8, 6}})->numParameters(),
      (10 * 8 + 8) + (8 * 6 + 6) + (6 * 3 + 3));
}

// Checkpoints written when the small CNNs' linear layers were fc1 and fc2 load under the seeds'
// names; a state holding both names keeps the old one as unexpected.
TEST(ModelZoo, small_cnn_checkpoints_with_the_earlier_names_still_load) {
  for (auto [name, first, second] :
       {std::tuple{"mnist_cnn", "dense1", "dense2"}, std::tuple{"cifar_cnn", "linear1", "linear2"}}) {
    auto saved = makeModel(name), model = makeModel(name);  // two draws: different weights
    const std::string now1 = first, now2 = second;
    nn::StateDict old;
    for (const auto& [key, t] : saved->stateDict()) {
      std::string k = key;
      if (k.starts_with(now1 + ".")) k = "fc1" + k.substr(now1.size());
      if (k.starts_with(now2 + ".")) k = "fc2" + k.substr(now2.size());
      old.insert(k, t.clone());
    }
    ASSERT_TRUE(old.contains("fc1.weight") && old.contains("fc2.bias")) << name;
    model->loadStateDict(old);
    for (const auto& [key, t] : model->stateDict()) {
      EXPECT_EQ(t.toVector<float>(), saved->stateDict().at(key).toVector<float>()) << name << " " << key;
    }
    EXPECT_EQ(model->currentKey("fc2.weight"), now2 + ".weight") << name;
    EXPECT_EQ(model->currentKey("conv1.bias"), "conv1.bias") << name;
    old.insert(now1 + ".weight", saved->stateDict().at(now1 + ".weight"));  // both names: fc1 unexpected
    EXPECT_THROW(model->loadStateDict(old), ValueError) << name;
  }
}

TEST(ModelZoo, parameter_names_and_order) {
  EXPECT_EQ(paramNames(*makeModel("mnist_cnn")),
            (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                      "conv3.weight", "conv3.bias", "dense1.weight", "dense1.bias",
                                      "dense2.weight", "dense2.bias"}));
  // The seeds' names: Net (PyTorch DDP MNIST) and MyNet (Paddle CIFAR-10).
  const auto cifar = paramNames(*makeModel("cifar_cnn"));
  EXPECT_EQ(std::vector<std::string>(cifar.begin() + 6, cifar.end()),
            (std::vector<std::string>{"linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"}));
  auto resnet = makeModel("resnet18_cifar");
  auto keys = resnet->stateDict().keys();
  ASSERT_EQ(keys.size(), 122u);  // torch 1.13: len(state_dict()) of the same model
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + 12),
            (std::vector<std::string>{"conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean",
                                      "bn1.running_var", "bn1.num_batches_tracked", "layer1.0.conv1.weight",
                                      "layer1.0.bn1.weight", "layer1.0.bn1.bias", "layer1.0.bn1.running_mean",
                                      "layer1.0.bn1.running_var", "layer1.0.bn1.num_batches_tracked"}));
  EXPECT_TRUE(resnet->stateDict().contains("layer2.0.downsample.0.weight"));
  EXPECT_TRUE(resnet->stateDict().contains("layer4.1.bn2.running_var"));
  EXPECT_EQ(keys.back(), "fc.bias");
  EXPECT_EQ(paramNames(*makeModel("mlp", ModelOptions{.in_features = 4, .out_features = 2, .hidden = {3}})),
            (std::vector<std::string>{"1.weight", "1.bias", "3.weight", "3.bias"}));
}

TEST(ModelZoo, language_models_are_those_registered_as_such) {
  const std::vector<std::string> language = languageModelNames();
  EXPECT_EQ(language, (std::vector<std::string>{"gpt", "llama"}));
  for (const std::string& name : modelNames()) {
    EXPECT_EQ(isLanguageModel(name), std::find(language.begin(), language.end(), name) != language.end())
        << name;
  }
  EXPECT_FALSE(isLanguageModel("gpt5")) << "an unknown name is no language model";
}

TEST(ModelZoo, unknown_name_lists_the_known_ones) {
  try {
    makeModel("resnet101");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "unknown model 'resnet101'; known models: cifar_cnn, gpt, linear, llama, mlp, mnist_cnn, "
              "resnet18, resnet18_cifar, resnet50");
  }
}

TEST(ModelZoo, seeded_models_are_identical) {
  Generator g1(5), g2(5);
  auto a = makeModel("mnist_cnn", ModelOptions{.generator = &g1});
  auto b = makeModel("mnist_cnn", ModelOptions{.generator = &g2});
  for (const auto& [n, t] : a->stateDict())
    EXPECT_EQ(t.toVector<float>(), b->stateDict().at(n).toVector<float>());
}

// Every zoo model built in a DeferredInit scope (what a pipeline stage does) allocates none of its
// parameters or buffers, and materialised they are bitwise those of an eager build, and the
// generator ends where an eager build leaves it.
TEST(ModelZoo, deferred_builds_allocate_nothing_and_materialise_to_the_eager_model) {
  for (const std::string& name : modelNames()) {
    ModelOptions o;
    if (isLanguageModel(name)) o.model_type = name == "gpt" ? "gpt-nano" : "llama-tiny";
    Generator g_eager(9), g_lazy(9);
    o.generator = &g_eager;
    auto eager = makeModel(name, o);
    o.generator = &g_lazy;
    std::shared_ptr<Module> lazy;
    {
      DeferredInit scope;
      lazy = makeModel(name, o);
    }
    EXPECT_EQ(g_lazy.offset(), g_eager.offset()) << name;
    for (const auto& [key, t] : lazy->stateDict()) EXPECT_TRUE(t.storage()->deferred()) << name << " " << key;
    const StateDict want = eager->stateDict();
    for (const auto& [key, t] : lazy->stateDict()) {
      const Tensor& e = want.at(key);
      ASSERT_EQ(t.shape(), e.shape()) << name << " " << key;
      Tensor a = t.to(DType::f64), b = e.to(DType::f64);
      EXPECT_EQ(a.toVector<double>(), b.toVector<double>()) << name << " " << key;
    }
  }
}

TEST(ModelZoo, mnist_cnn_matches_torch) {
  OneThread one_thread;
  auto m = makeModel("mnist_cnn");
  setParams(*m);
  Variable y = m->forward(Variable(input({2, 1, 28, 28})));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
  EXPECT_TRUE(lockstep::testing::tensorsNear(y.tensor(), Tensor::fromVector<double>(kTorchMnistCnn, {2, 10}),
                                             2e-5, 1e-4));
  // Gradients reach every parameter.
  autograd::sum(y).backward();
  for (auto& p : m->parameters()) EXPECT_TRUE(p.hasGrad());
}

// small_cnn.h runs relu after the max-pool; the textbook order (relu, then pool) must give the same
// output and the same gradient for every parameter, bit for bit.
TEST(ModelZoo, mnist_cnn_relu_after_pool_equals_relu_then_pool) {
  OneThread one_thread;
  auto m = makeModel("mnist_cnn");
  setParams(*m);
  Tensor x = input({4, 1, 28, 28}).toFormat(MemoryFormat::channels_last);
  Variable y = m->forward(Variable(x));
  autograd::sum(autograd::mul(y, y)).backward();

  std::map<std::string, Variable> p;
  for (auto& [name, v] : m->namedParameters()) p[name] = Variable(v.tensor().clone(), true);
  autograd::Conv2dOptions relu;
  relu.fuse_relu = true;
  autograd::Pool2dOptions pool;
  Variable h =
      autograd::maxPool2d(autograd::conv2d(Variable(x), p["conv1.weight"], p["conv1.bias"], relu), pool);
  h = autograd::maxPool2d(autograd::conv2d(h, p["conv2.weight"], p["conv2.bias"], relu), pool);
  h = autograd::flatten(autograd::conv2d(h, p["conv3.weight"], p["conv3.bias"], relu), 1);
  h = autograd::relu(autograd::linear(h, p["dense1.weight"], p["dense1.bias"]));
  Variable y2 = autograd::linear(h, p["dense2.weight"], p["dense2.bias"]);
  autograd::sum(autograd::mul(y2, y2)).backward();

  EXPECT_EQ(y.tensor().toVector<float>(), y2.tensor().toVector<float>());
  for (auto& [name, v] : m->namedParameters()) {
    EXPECT_EQ(v.grad().toVector<float>(), p[name].grad().toVector<float>()) << name;
  }
}

TEST(ModelZoo, cifar_cnn_matches_torch) {
  OneThread one_thread;
  auto m = makeModel("cifar_cnn");
  setParams(*m);
  Variable y = m->forward(Variable(input({2, 3, 32, 32})));
  EXPECT_TRUE(lockstep::testing::tensorsNear(y.tensor(), Tensor::fromVector<double>(kTorchCifarCnn, {2, 10}),
                                             2e-5, 1e-4));
}

// PyTorch's CPU convolutions are direct; Winograd's (lockstep's default where it pays: here the
// first stages at batch 2) differ by ~1e-6 relative, which batch 2's training-mode batch norm
// amplifies to ~4e-3 in the logits. The comparison is of the networks, so both sides run direct.
struct DirectConvolutions {
  bool prev = kernels::cpuConvWinograd();
  DirectConvolutions() { kernels::setCpuConvWinograd(false); }
  ~DirectConvolutions() { kernels::setCpuConvWinograd(prev); }
};

TEST(ModelZoo, resnet18_cifar_matches_torch) {
  OneThread one_thread;
  DirectConvolutions direct;
  auto m = makeModel("resnet18_cifar");
  setParams(*m);
  m->eval();
  Variable x(input({2, 3, 32, 32}));
  Variable y = m->forward(x);
  EXPECT_TRUE(lockstep::testing::tensorsNear(
      y.tensor(), Tensor::fromVector<double>(kTorchResnetEval, {2, 10}), 1e-4, 1e-3));
  m->train();
  y = m->forward(x);
  EXPECT_TRUE(lockstep::testing::tensorsNear(
      y.tensor(), Tensor::fromVector<double>(kTorchResnetTrain, {2, 10}), 1e-4, 1e-3));
  Tensor rm = m->stateDict().at("layer1.0.bn1.running_mean").narrow(0, 0, 4);
  EXPECT_TRUE(lockstep::testing::tensorsNear(rm, Tensor::fromVector<double>(kTorchResnetRunningMean, {4}),
                                             1e-6, 1e-3));
  EXPECT_EQ(m->stateDict().at("bn1.num_batches_tracked").item<int64_t>(), 1);
  autograd::sum(y).backward();
  for (auto& [n, p] : m->namedParameters()) EXPECT_TRUE(p.hasGrad()) << n;
}
