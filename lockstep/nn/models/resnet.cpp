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

Variable ResNet18Cifar::forward(const Variable& input) {
  Variable x = bn1_->forwardRelu(conv1_->forward(toChannelsLast(input)));
  for (auto& stage : layers_) x = stage->forward(x);
  x = autograd::flatten(avgpool_->forward(x), 1);
  return fc_->forward(x);
}

}  // namespace lockstep::nn
