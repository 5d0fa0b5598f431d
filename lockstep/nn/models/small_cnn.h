#pragma once
// The small three-conv CNNs of the model zoo: mnist_cnn (1x28x28 -> 10, the PyTorch DDP seed's Net)
// and cifar_cnn (3x32x32 -> 10, the Paddle seed's MyNet). Both are
//   conv1 3x3 (->32) + relu, maxpool 2, conv2 3x3 (->64) + relu, maxpool 2, conv3 3x3 (->64) + relu,
//   flatten, linear (->64) + relu, linear (->num_classes)
// with the linear layers named as in the seed's model (Net: dense1, dense2; MyNet: linear1,
// linear2; checkpoints that call them fc1, fc2 still load), and output logits (no softmax). Where a max-pool
// follows, relu runs after the pool instead: max(relu(a), relu(b)) == relu(max(a, b)) exactly, and the
// gradients agree too (both are zero wherever the window's maximum is <= 0), but relu then touches a 4x
// smaller tensor and the conv's full-size output is freed right after the pool. conv3 + relu run as one fused
// kernel. A 4-d input is converted to channels_last first, the layout oneDNN's convolutions are fastest on.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/nn/activation.h"
#include "lockstep/nn/conv2d.h"
#include "lockstep/nn/layer_sequence.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/pooling.h"

namespace lockstep::nn {

struct SmallCnnOptions {
  int64_t in_channels = 1;
  /// Input height = width (28 for MNIST, 32 for CIFAR-10).
  int64_t image_size = 28;
  int64_t num_classes = 10;
  /// Borrowed during construction; nullptr = defaultGenerator().
  Generator* generator = nullptr;
  /// The two linear layers' names (the parameters are "<name>.weight", "<name>.bias").
  std::array<std::string, 2> linear_names = {"dense1", "dense2"};
};

class SmallCnn : public Module, public HasLayerSequence {
 public:
  /// type_name: "MnistCnn" or "CifarCnn" (what describe() prints).
  SmallCnn(std::string type_name, const SmallCnnOptions& options);
  Variable forward(const Variable& x) override;
  /// The layers a pipeline cuts into stages (nn/layer_sequence.h): conv1 (+ pool), conv2 (+ pool), conv3, the
  /// first linear layer (+ flatten), the second.
  NamedModules sequenceLayers() override;

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<MaxPool2d> pool_;
  std::shared_ptr<Flatten> flatten_;
  std::shared_ptr<Linear> fc1_, fc2_;
};

/// x as a channels_last Variable when it is 4-d and needs no gradient (data), else x unchanged.
Variable toChannelsLast(const Variable& x);

}  // namespace lockstep::nn
