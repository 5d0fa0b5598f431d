#include "lockstep/nn/models/resnet.h"

#include "lockstep/autograd/ops/shape.h"
#include "lockstep/nn/models/small_cnn.h"

namespace lockstep::nn {

std::shared_ptr<Conv2d> resnetConv(int64_t in, int64_t out, int64_t k, int64_t stride, Generator* gen) {
  Conv2dOptions o;
  o.in_channels = in;
  o.out_channels = out;
  o.kernel_size = {k, k};
  o.stride = {stride, stride};
  o.padding = {k / 2, k / 2};
  o.bias = false;
  o.generator = gen;
  return std::make_shared<Conv2d>(o);
}

std::shared_ptr<BatchNorm2d> resnetBatchNorm(int64_t c) {
  return std::make_shared<BatchNorm2d>(BatchNorm2dOptions{c});
}

std::shared_ptr<Sequential> resnetDownsample(int64_t in, int64_t out, int64_t stride, Generator* gen) {
  if (stride == 1 && in == out) return nullptr;
  auto ds = std::make_shared<Sequential>();
  ds->push_back(resnetConv(in, out, 1, stride, gen));
  ds->push_back(resnetBatchNorm(out));
  return ds;
}

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Generator* gen)
    : Module("BasicBlock") {
  conv1_ = registerModule("conv1", resnetConv(in_planes, planes, 3, stride, gen));
  bn1_ = registerModule("bn1", resnetBatchNorm(planes));
  conv2_ = registerModule("conv2", resnetConv(planes, planes, 3, 1, gen));
  bn2_ = registerModule("bn2", resnetBatchNorm(planes));
  if (auto ds = resnetDownsample(in_planes, planes, stride, gen))
    downsample_ = registerModule("downsample", ds);
}

Variable BasicBlock::forward(const Variable& x) {
  Variable out = bn1_->forwardRelu(conv1_->forward(x));
  Variable shortcut = downsample_ ? downsample_->forward(x) : x;
  return bn2_->forwardRelu(conv2_->forward(out), shortcut);
}

ResNet18Cifar::ResNet18Cifar(const ResNetCifarOptions& options) : Module("ResNet18Cifar") {
  Generator* gen = options.generator;
  conv1_ = registerModule("conv1", resnetConv(3, 64, 3, 1, gen));
  bn1_ = registerModule("bn1", resnetBatchNorm(64));
  const int64_t planes[4] = {64, 128, 256, 512};
  int64_t in_planes = 64;
  for (int i = 0; i < 4; ++i) {
    auto stage = std::make_shared<Sequential>();
    stage->push_back(std::make_shared<BasicBlock>(in_planes, planes[i], i == 0 ? 1 : 2, gen));
    stage->push_back(std::make_shared<BasicBlock>(planes[i], planes[i], 1, gen));
    in_planes = planes[i];
    layers_[i] = registerModule("layer" + std::to_string(i + 1), stage);
  }
  avgpool_ = registerModule("avgpool", std::make_shared<AdaptiveAvgPool2d>(std::array<int64_t, 2>{1, 1}));
  fc_ = registerModule("fc", std::make_shared<Linear>(LinearOptions{512, options.num_classes, true, gen}));
}

Variable resnetStem(Conv2d& conv1, BatchNorm2d& bn1, const Variable& input) {
  return bn1.forwardRelu(conv1.forward(toChannelsLast(input)));
}

Variable resnetHead(AdaptiveAvgPool2d& avgpool, Linear& fc, const Variable& x) {
  return fc.forward(autograd::flatten(avgpool.forward(x), 1));
}

NamedModules resnetSequenceLayers(std::shared_ptr<SequenceLayer> stem,
                                  const std::shared_ptr<Sequential> (&stages)[4],
                                  const std::shared_ptr<AdaptiveAvgPool2d>& avgpool,
                                  const std::shared_ptr<Linear>& fc) {
  NamedModules layers{{"stem", std::move(stem)}};
  for (size_t i = 0; i < 4; ++i) {
    for (size_t b = 0; b < stages[i]->size(); ++b)
      layers.emplace_back("layer" + std::to_string(i + 1) + "." + std::to_string(b), (*stages[i])[b]);
  }
  auto head = std::make_shared<SequenceLayer>(
      "ResNetHead", NamedModules{{"avgpool", avgpool}, {"fc", fc}},
      [avgpool, fc](Module&, const Variable& x) { return resnetHead(*avgpool, *fc, x); });
  layers.emplace_back("head", std::move(head));
  return layers;
}

Variable ResNet18Cifar::forward(const Variable& input) {
  Variable x = resnetStem(*conv1_, *bn1_, input);
  for (auto& stage : layers_) x = stage->forward(x);
  return resnetHead(*avgpool_, *fc_, x);
}

NamedModules ResNet18Cifar::sequenceLayers() {
  auto conv1 = conv1_;
  auto bn1 = bn1_;
  auto stem = std::make_shared<SequenceLayer>(
      "ResNetStem", NamedModules{{"conv1", conv1}, {"bn1", bn1}},
      [conv1, bn1](Module&, const Variable& x) { return resnetStem(*conv1, *bn1, x); });
  return resnetSequenceLayers(stem, layers_, avgpool_, fc_);
}

}  // namespace lockstep::nn
