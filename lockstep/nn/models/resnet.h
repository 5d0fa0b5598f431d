#pragma once
// ResNet-18 for CIFAR-10 (32x32 inputs): a 3x3 stride-1 stem conv to 64 channels with batch norm and
// no max-pool, four stages of two BasicBlocks (64, 128, 256, 512 channels; stages 2-4 start with
// stride 2 and a 1x1 conv + BN shortcut), adaptive average pooling and a linear classifier.
// Names follow torchvision ("layer2.0.downsample.0.weight", "fc.bias"); 11,173,962 parameters.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/nn/batch_norm.h"
#include "lockstep/nn/conv2d.h"
#include "lockstep/nn/layer_sequence.h"
#include "lockstep/nn/linear.h"
#include "lockstep/nn/pooling.h"
#include "lockstep/nn/sequential.h"

namespace lockstep::nn {

/// The ResNets' convolution: k x k, padding k / 2, no bias (a BatchNorm follows).
std::shared_ptr<Conv2d> resnetConv(int64_t in, int64_t out, int64_t k, int64_t stride, Generator* gen);
/// The ResNets' BatchNorm2d over c channels, PyTorch's defaults.
std::shared_ptr<BatchNorm2d> resnetBatchNorm(int64_t c);
/// A block's shortcut when its output differs from its input in channels or size: 1x1 conv with
/// the stride + BatchNorm (torchvision's downsample); null when the input passes as it is.
std::shared_ptr<Sequential> resnetDownsample(int64_t in, int64_t out, int64_t stride, Generator* gen);

/// The CIFAR ResNet's stem, relu(bn1(conv1(x))) on x in channels_last.
Variable resnetStem(Conv2d& conv1, BatchNorm2d& bn1, const Variable& input);
/// fc(flatten(avgpool(x))).
Variable resnetHead(AdaptiveAvgPool2d& avgpool, Linear& fc, const Variable& x);
/// A ResNet's layer sequence: the stem, every block of the four stages ("layer1.0", ...), the head.
NamedModules resnetSequenceLayers(std::shared_ptr<SequenceLayer> stem,
                                  const std::shared_ptr<Sequential> (&stages)[4],
                                  const std::shared_ptr<AdaptiveAvgPool2d>& avgpool,
                                  const std::shared_ptr<Linear>& fc);

class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Generator* gen);
  /// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<Sequential> downsample_;  // null: identity shortcut
};

struct ResNetCifarOptions {
  int64_t num_classes = 10;
  /// Borrowed during construction; nullptr = defaultGenerator().
  Generator* generator = nullptr;
};

class ResNet18Cifar : public Module, public HasLayerSequence {
 public:
  explicit ResNet18Cifar(const ResNetCifarOptions& options = {});
  Variable forward(const Variable& x) override;
  /// The layers a pipeline cuts into stages (nn/layer_sequence.h): the stem (conv1, bn1), each BasicBlock,
  /// the head (avgpool, fc).
  NamedModules sequenceLayers() override;

 private:
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::shared_ptr<Sequential> layers_[4];
  std::shared_ptr<AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<Linear> fc_;
};

}  // namespace lockstep::nn
