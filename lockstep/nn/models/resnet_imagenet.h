#pragma once
// torchvision's ImageNet ResNets (torchvision.models.resnet18 / resnet50, v1.5): a 7x7 stride-2 stem
// conv to 64 channels + BN + ReLU + 3x3 stride-2 max-pool, four stages of BasicBlocks (18: 2, 2, 2,
// 2) or Bottlenecks (50: 3, 4, 6, 3; expansion 4, the stride on the 3x3 conv), adaptive average
// pooling and a linear classifier. Parameter names, their order and the state_dict are
// torchvision's ("layer3.5.conv2.weight", "layer1.0.downsample.1.running_var", "fc.bias"), so a
// state dict loads into torchvision's model strictly. 11,689,512 (18) and 25,557,032 (50)
// parameters with 1000 classes.
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

/// torchvision's Bottleneck: 1x1 conv to planes, 3x3 conv (stride) at planes, 1x1 conv to
/// planes * 4, each with BN; a 1x1 conv + BN shortcut when the stride or the width changes.
class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, Generator* gen);
  /// relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x)))))))) + shortcut(x)).
  Variable forward(const Variable& x) override;

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<Sequential> downsample_;  // null: identity shortcut
};

struct ResNetOptions {
  /// 18 (BasicBlock) or 50 (Bottleneck); ValueError otherwise.
  int64_t depth = 50;
  int64_t num_classes = 1000;
  /// Borrowed during construction; nullptr = defaultGenerator().
  Generator* generator = nullptr;
};

/// Initialised as torchvision's ResNet.__init__ does: every conv weight kaiming_normal_(mode
/// fan_out, relu), every BN weight 1 and bias 0, the Linear layer PyTorch's default.
class ResNet : public Module, public HasLayerSequence {
 public:
  explicit ResNet(const ResNetOptions& options = {});
  /// [N, 3, H, W] (any H, W >= 32; 224 for ImageNet) -> [N, num_classes] logits.
  Variable forward(const Variable& x) override;
  /// The layers a pipeline cuts into stages (nn/layer_sequence.h): the stem (conv1, bn1, maxpool), each
  /// block, the head (avgpool, fc).
  NamedModules sequenceLayers() override;

 private:
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
  std::shared_ptr<MaxPool2d> maxpool_;
  std::shared_ptr<Sequential> layers_[4];
  std::shared_ptr<AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<Linear> fc_;
};

}  // namespace lockstep::nn
