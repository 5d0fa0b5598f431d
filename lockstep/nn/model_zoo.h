#pragma once
// The model zoo: models by name, as the trainer's config names them.
//   mnist_cnn       1x28x28 -> 10 logits, 93,322 parameters (see small_cnn.h)
//   cifar_cnn       3x32x32 -> 10 logits, the Paddle seed's MyNet, 122,570 parameters
//   linear          one Linear layer (in_features -> out_features; default 20 -> 1)
//   mlp             Flatten, then Linear+ReLU per hidden size, then Linear (Sequential: "1.weight", ...)
//   resnet18_cifar  CIFAR ResNet-18 (see resnet.h), 11,173,962 parameters
// All parameters are drawn from options.generator (or the default generator) in registration order,
// so a seed fixes the model.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/nn/module.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::nn {

struct ModelOptions {
  /// linear and mlp; 0 = the model's default (linear 20, mlp 784).
  int64_t in_features = 0;
  /// linear and mlp; 0 = the model's default (linear 1, mlp 10).
  int64_t out_features = 0;
  /// mlp hidden layer sizes; empty = {128}.
  std::vector<int64_t> hidden{};
  /// mnist_cnn, cifar_cnn and resnet18_cifar.
  int64_t num_classes = 10;
  /// Borrowed during construction; nullptr = defaultGenerator().
  Generator* generator = nullptr;
};

/// Builds the named model; ValueError listing the known names for an unknown one.
std::shared_ptr<Module> makeModel(const std::string& name, const ModelOptions& options = {});
/// The names makeModel() knows, sorted.
std::vector<std::string> modelNames();

}  // namespace lockstep::nn
