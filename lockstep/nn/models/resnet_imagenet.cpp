#include "lockstep/nn/models/resnet_imagenet.h"

#include "lockstep/autograd/ops/shape.h"
#include "lockstep/nn/init.h"
#include "lockstep/nn/models/resnet.h"
#include "lockstep/nn/models/small_cnn.h"

namespace lockstep::nn {

namespace {
struct Stage {
  int64_t planes, blocks, stride;
};
}  // namespace

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, Generator* gen)
    : Module("Bottleneck") {
  const int64_t out = planes * kExpansion;
  conv1_ = registerModule("conv1", resnetConv(in_planes, planes, 1, 1, gen));
  bn1_ = registerModule("bn1", resnetBatchNorm(planes));
  conv2_ = registerModule("conv2", resnetConv(planes, planes, 3, stride, gen));
  bn2_ = registerModule("bn2", resnetBatchNorm(planes));
  conv3_ = registerModule("conv3", resnetConv(planes, out, 1, 1, gen));
  bn3_ = registerModule("bn3", resnetBatchNorm(out));
  if (auto ds = resnetDownsample(in_planes, out, stride, gen)) downsample_ = registerModule("downsample", ds);
}

Variable Bottleneck::forward(const Variable& x) {
  Variable out = bn1_->forwardRelu(conv1_->forward(x));
  out = bn2_->forwardRelu(conv2_->forward(out));
  Variable shortcut = downsample_ ? downsample_->forward(x) : x;
  return bn3_->forwardRelu(conv3_->forward(out), shortcut);
}

ResNet::ResNet(const ResNetOptions& options) : Module("ResNet" + std::to_string(options.depth)) {
  LOCKSTEP_ENFORCE(options.depth == 18 || options.depth == 50, ValueError, "ResNet: depth ", options.depth,
                   " is not built (18 or 50)");
  LOCKSTEP_ENFORCE(options.num_classes >= 1, ValueError, "ResNet: num_classes must be >= 1, got ",
                   options.num_classes);
  Generator* gen = options.generator;
  const bool bottleneck = options.depth == 50;
  conv1_ = registerModule("conv1", resnetConv(3, 64, 7, 2, gen));
  bn1_ = registerModule("bn1", resnetBatchNorm(64));
  Pool2dOptions pool;
  pool.kernel = {3, 3};
  pool.stride = {2, 2};
  pool.padding = {1, 1};
  maxpool_ = registerModule("maxpool", std::make_shared<MaxPool2d>(pool));
  const Stage stages[4] = {{64, bottleneck ? 3 : 2, 1},
                           {128, bottleneck ? 4 : 2, 2},
                           {256, bottleneck ? 6 : 2, 2},
                           {512, bottleneck ? 3 : 2, 2}};
  const int64_t expansion = bottleneck ? Bottleneck::kExpansion : 1;
  int64_t in_planes = 64;
  for (int i = 0; i < 4; ++i) {
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < stages[i].blocks; ++b) {
      const int64_t stride = b == 0 ? stages[i].stride : 1;
      if (bottleneck) {
        stage->push_back(std::make_shared<Bottleneck>(in_planes, stages[i].planes, stride, gen));
      } else {
        stage->push_back(std::make_shared<BasicBlock>(in_planes, stages[i].planes, stride, gen));
      }
      in_planes = stages[i].planes * expansion;
    }
    layers_[i] = registerModule("layer" + std::to_string(i + 1), stage);
  }
  avgpool_ = registerModule("avgpool", std::make_shared<AdaptiveAvgPool2d>(std::array<int64_t, 2>{1, 1}));
  fc_ = registerModule("fc",
                       std::make_shared<Linear>(LinearOptions{in_planes, options.num_classes, true, gen}));
  // torchvision re-draws every conv after construction, in module order; BN already is (1, 0).
  Generator& g = gen ? *gen : defaultGenerator();
  for (auto& [name, m] : namedModules()) {
    if (auto* c = dynamic_cast<Conv2d*>(m)) {
      Tensor w = c->weight().tensor();
      init::kaimingNormal(w, 0.0, init::FanMode::fan_out, "relu", g);
    }
  }
}

Variable ResNet::forward(const Variable& input) {
  Variable x = maxpool_->forward(resnetStem(*conv1_, *bn1_, input));
  for (auto& stage : layers_) x = stage->forward(x);
  return resnetHead(*avgpool_, *fc_, x);
}

NamedModules ResNet::sequenceLayers() {
  auto conv1 = conv1_;
  auto bn1 = bn1_;
  auto maxpool = maxpool_;
  auto stem = std::make_shared<SequenceLayer>(
      "ResNetStem", NamedModules{{"conv1", conv1}, {"bn1", bn1}, {"maxpool", maxpool}},
      [conv1, bn1, maxpool](Module&, const Variable& x) {
        return maxpool->forward(resnetStem(*conv1, *bn1, x));
      });
  return resnetSequenceLayers(stem, layers_, avgpool_, fc_);
}

}  // namespace lockstep::nn
