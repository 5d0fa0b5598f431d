#include "lockstep/nn/models/model_zoo.h"

#include <functional>
#include <map>

#include "lockstep/nn/activation.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/models/gpt.h"
#include "lockstep/nn/models/llama.h"
#include "lockstep/nn/models/resnet.h"
#include "lockstep/nn/models/resnet_imagenet.h"
#include "lockstep/nn/models/small_cnn.h"
#include "lockstep/nn/sequential.h"

namespace lockstep::nn {

namespace {
using Factory = std::function<std::shared_ptr<Module>(const ModelOptions&)>;

// linear's and mlp's outputs (classifierOutputs reads them too).
int64_t linearOutputs(const ModelOptions& o) { return o.out_features > 0 ? o.out_features : 1; }
int64_t mlpOutputs(const ModelOptions& o) { return o.out_features > 0 ? o.out_features : 10; }

std::shared_ptr<Module> makeMlp(const ModelOptions& o) {
  const int64_t in = o.in_features > 0 ? o.in_features : 784;
  const int64_t out = mlpOutputs(o);
  const std::vector<int64_t> hidden = o.hidden.empty() ? std::vector<int64_t>{128} : o.hidden;
  auto seq = std::make_shared<Sequential>();
  seq->push_back(std::make_shared<Flatten>());
  int64_t prev = in;
  for (int64_t h : hidden) {
    seq->push_back(std::make_shared<Linear>(LinearOptions{prev, h, true, o.generator}));
    seq->push_back(std::make_shared<ReLU>());
    prev = h;
  }
  seq->push_back(std::make_shared<Linear>(LinearOptions{prev, out, true, o.generator}));
  return seq;
}

std::shared_ptr<Module> makeGpt(const ModelOptions& o) {
  GptOptions g = gptPreset(o.model_type.empty() ? "gpt-mini" : o.model_type);
  g.vocab_size = o.vocab_size > 0 ? o.vocab_size : 256;
  g.block_size = o.block_size > 0 ? o.block_size : 256;
  if (o.n_layer > 0) g.n_layer = o.n_layer;
  if (o.n_head > 0) g.n_head = o.n_head;
  if (o.n_embd > 0) g.n_embd = o.n_embd;
  LOCKSTEP_ENFORCE(o.n_kv_head == 0 && o.intermediate_size == 0, ValueError,
                   "model gpt has no n_kv_head or intermediate_size (those are llama's): remove them");
  if (o.dropout) g.dropout = *o.dropout;
  g.checkpoint_every = o.checkpoint_every;
  g.generator = o.generator;
  return std::make_shared<Gpt>(g);
}

std::shared_ptr<Module> makeLlama(const ModelOptions& o) {
  LlamaOptions l = llamaPreset(o.model_type.empty() ? "llama-tiny" : o.model_type);
  l.vocab_size = o.vocab_size > 0 ? o.vocab_size : 256;
  l.block_size = o.block_size > 0 ? o.block_size : 256;
  if (o.n_layer > 0) l.n_layer = o.n_layer;
  if (o.n_head > 0) l.n_head = o.n_head;
  if (o.n_kv_head > 0) l.n_kv_head = o.n_kv_head;
  if (o.n_embd > 0) l.n_embd = o.n_embd;
  if (o.intermediate_size > 0) l.intermediate_size = o.intermediate_size;
  if (o.dropout) l.dropout = *o.dropout;
  l.checkpoint_every = o.checkpoint_every;
  l.generator = o.generator;
  return std::make_shared<Llama>(l);
}

// What a zoo model is, registered with it, so that callers ask the zoo rather than compare names.
struct ModelTraits {
  bool language_model = false;
  /// Whether it lists its layers (nn::layerSequence), so that a pipeline can cut it into stages.
  bool layer_sequence = true;
};

struct ZooEntry {
  Factory make;
  ModelTraits traits;
};

const std::map<std::string, ZooEntry>& registry() {
  static const ModelTraits kLanguageModel{.language_model = true, .layer_sequence = true};
  static const ModelTraits kOneLayer{.language_model = false, .layer_sequence = false};
  static const std::map<std::string, ZooEntry> r = {
      {"mnist_cnn",
       {[](const ModelOptions& o) {
          // The PyTorch DDP seed's Net: dense1, dense2.
          return std::make_shared<SmallCnn>("MnistCnn", SmallCnnOptions{1, 28, o.num_classes, o.generator});
        },
        {}}},
      {"cifar_cnn",
       {[](const ModelOptions& o) {
          // The Paddle seed's MyNet: linear1, linear2.
          return std::make_shared<SmallCnn>(
              "CifarCnn", SmallCnnOptions{3, 32, o.num_classes, o.generator, {"linear1", "linear2"}});
        },
        {}}},
      {"linear",
       {[](const ModelOptions& o) {
          return std::make_shared<Linear>(
              LinearOptions{o.in_features > 0 ? o.in_features : 20, linearOutputs(o), true, o.generator});
        },
        kOneLayer}},
      {"mlp", {makeMlp, {}}},
      {"gpt", {makeGpt, kLanguageModel}},
      {"llama", {makeLlama, kLanguageModel}},
      {"resnet18",
       {[](const ModelOptions& o) {
          return std::make_shared<ResNet>(ResNetOptions{18, o.num_classes, o.generator});
        },
        {}}},
      {"resnet50",
       {[](const ModelOptions& o) {
          return std::make_shared<ResNet>(ResNetOptions{50, o.num_classes, o.generator});
        },
        {}}},
      {"resnet18_cifar",
       {[](const ModelOptions& o) {
          return std::make_shared<ResNet18Cifar>(ResNetCifarOptions{o.num_classes, o.generator});
        },
        {}}},
  };
  return r;
}

std::string knownModels() {
  std::string known;
  for (const auto& n : modelNames()) known += (known.empty() ? "" : ", ") + n;
  return known;
}
}  // namespace

bool isLanguageModel(const std::string& name) {
  auto it = registry().find(name);
  return it != registry().end() && it->second.traits.language_model;
}

int64_t classifierOutputs(const std::string& name, const ModelOptions& options) {
  if (name == "linear") return linearOutputs(options);
  if (name == "mlp") return mlpOutputs(options);
  if (!registry().count(name) || isLanguageModel(name)) return 0;
  return options.num_classes;
}

bool hasLayerSequence(const std::string& name) {
  auto it = registry().find(name);
  return it != registry().end() && it->second.traits.layer_sequence;
}

std::vector<std::string> modelNames() {
  std::vector<std::string> names;
  for (const auto& [n, e] : registry()) names.push_back(n);
  return names;
}

std::vector<std::string> languageModelNames() {
  std::vector<std::string> names;
  for (const auto& [n, e] : registry()) {
    if (e.traits.language_model) names.push_back(n);
  }
  return names;
}

std::shared_ptr<Module> makeModel(const std::string& name, const ModelOptions& options) {
  auto it = registry().find(name);
  if (it == registry().end())
    throw ValueError("unknown model '" + name + "'; known models: " + knownModels());
  return it->second.make(options);
}

}  // namespace lockstep::nn
