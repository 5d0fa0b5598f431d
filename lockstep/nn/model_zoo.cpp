#include "lockstep/nn/model_zoo.h"

#include <functional>
#include <map>

#include "lockstep/nn/activation.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/resnet.h"
#include "lockstep/nn/sequential.h"
#include "lockstep/nn/small_cnn.h"

namespace lockstep::nn {

namespace {
using Factory = std::function<std::shared_ptr<Module>(const ModelOptions&)>;

std::shared_ptr<Module> makeMlp(const ModelOptions& o) {
  const int64_t in = o.in_features > 0 ? o.in_features : 784;
  const int64_t out = o.out_features > 0 ? o.out_features : 10;
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

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> r = {
      {"mnist_cnn",
       [](const ModelOptions& o) {
         return std::make_shared<SmallCnn>("MnistCnn", SmallCnnOptions{1, 28, o.num_classes, o.generator});
       }},
      {"cifar_cnn",
       [](const ModelOptions& o) {
         return std::make_shared<SmallCnn>("CifarCnn", SmallCnnOptions{3, 32, o.num_classes, o.generator});
       }},
      {"linear",
       [](const ModelOptions& o) {
         return std::make_shared<Linear>(LinearOptions{o.in_features > 0 ? o.in_features : 20,
                                                       o.out_features > 0 ? o.out_features : 1, true,
                                                       o.generator});
       }},
      {"mlp", makeMlp},
      {"resnet18_cifar",
       [](const ModelOptions& o) {
         return std::make_shared<ResNet18Cifar>(ResNetCifarOptions{o.num_classes, o.generator});
       }},
  };
  return r;
}
}  // namespace

std::vector<std::string> modelNames() {
  std::vector<std::string> names;
  for (const auto& [n, f] : registry()) names.push_back(n);
  return names;
}

std::shared_ptr<Module> makeModel(const std::string& name, const ModelOptions& options) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : modelNames()) known += (known.empty() ? "" : ", ") + n;
    throw ValueError("unknown model '" + name + "'; known models: " + known);
  }
  return it->second(options);
}

}  // namespace lockstep::nn
