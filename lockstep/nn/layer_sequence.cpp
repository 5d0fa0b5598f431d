#include "lockstep/nn/layer_sequence.h"

#include <algorithm>
#include <map>

#include "lockstep/nn/sequential.h"
#include "lockstep/util/error.h"

namespace lockstep::nn {

Variable LayerSequence::forward(const Variable& x, size_t begin, size_t end) const {
  end = std::min(end, layers.size());
  LOCKSTEP_CHECK(begin <= end, begin, end);
  Variable y = x;
  for (size_t i = begin; i < end; ++i) y = (*layers[i])(y);
  return y;
}

SequenceLayer::SequenceLayer(std::string type_name, NamedModules parts, Run run)
    : Module(std::move(type_name)), run_(std::move(run)) {
  for (auto& [name, part] : parts) registerModule(name, part);
}

LayerSequence layerSequence(Module& model) {
  LayerSequence seq;
  if (auto* source = dynamic_cast<HasLayerSequence*>(&model)) {
    for (auto& [name, layer] : source->sequenceLayers()) {
      seq.names.push_back(name);
      seq.layers.push_back(layer);
    }
  } else if (auto* sequential = dynamic_cast<Sequential*>(&model)) {
    for (auto& [name, layer] : sequential->namedChildren()) {
      seq.names.push_back(name);
      seq.layers.push_back(layer);
    }
  } else {
    throw ValueError(
        "model " + model.typeName() +
        " has no layer sequence, so it cannot be split into pipeline stages; use a model of the zoo "
        "that has one (mnist_cnn, cifar_cnn, mlp, resnet18_cifar, resnet18, resnet50, gpt, llama) or "
        "give the model nn::HasLayerSequence");
  }
  // Layers made for the sequence start in the model's mode, as its own submodules are.
  for (auto& layer : seq.layers) layer->train(model.isTraining());
  // A parameter is tied when two layers hold it: group the layers by the parameter they share.
  std::map<const autograd::VariableImpl*, std::string> names;
  for (const auto& [name, p] : model.namedParameters()) names.emplace(p.impl().get(), name);
  std::map<const autograd::VariableImpl*, std::vector<size_t>> users;
  std::vector<const autograd::VariableImpl*> order;
  for (size_t i = 0; i < seq.layers.size(); ++i) {
    for (const Variable& p : seq.layers[i]->parameters()) {
      auto& u = users[p.impl().get()];
      if (u.empty()) order.push_back(p.impl().get());
      if (u.empty() || u.back() != i) u.push_back(i);
    }
  }
  for (const auto* impl : order) {
    const auto& u = users[impl];
    if (u.size() < 2) continue;
    auto it = names.find(impl);
    LOCKSTEP_CHECK(it != names.end(), "a layer's parameter is not the model's", model.typeName());
    seq.tied.push_back({it->second, u});
  }
  return seq;
}

}  // namespace lockstep::nn
