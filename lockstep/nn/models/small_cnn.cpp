#include "lockstep/nn/models/small_cnn.h"

#include "lockstep/autograd/ops/activation.h"
#include "lockstep/autograd/ops/conv_pool.h"

namespace lockstep::nn {

Variable toChannelsLast(const Variable& x) {
  if (x.dim() != 4 || x.requiresGrad() || x.tensor().isChannelsLast()) return x;
  return Variable(x.tensor().toFormat(MemoryFormat::channels_last));
}

SmallCnn::SmallCnn(std::string type_name, const SmallCnnOptions& options) : Module(std::move(type_name)) {
  auto conv = [&](int64_t in, int64_t out, bool fuse_relu) {
    Conv2dOptions o;
    o.in_channels = in;
    o.out_channels = out;
    o.kernel_size = {3, 3};
    o.fuse_relu = fuse_relu;
    o.generator = options.generator;
    return std::make_shared<Conv2d>(o);
  };
  // Spatial size through the stack: s -> s-2 -> /2 -> -2 -> /2 -> -2.
  int64_t s = options.image_size;
  s = ((s - 2) / 2 - 2) / 2 - 2;
  LOCKSTEP_ENFORCE(s > 0, ValueError, typeName(), ": image_size ", options.image_size,
                   " is too small (need >= 18)");
  const int64_t flat = 64 * s * s;
  // Registration order (= parameter order) follows the PyTorch definition: conv1, conv2, conv3, then
  // the two linear layers.
  conv1_ = registerModule("conv1", conv(options.in_channels, 32, false));
  pool_ = registerModule("pool", std::make_shared<MaxPool2d>(Pool2dOptions{}));
  conv2_ = registerModule("conv2", conv(32, 64, false));
  conv3_ = registerModule("conv3", conv(64, 64, true));
  flatten_ = registerModule("flatten", std::make_shared<Flatten>());
  const auto& [first, second] = options.linear_names;
  fc1_ = registerModule(first, std::make_shared<Linear>(LinearOptions{flat, 64, true, options.generator}));
  fc2_ = registerModule(
      second, std::make_shared<Linear>(LinearOptions{64, options.num_classes, true, options.generator}));
  // lockstep's first names for them.
  if (first != "fc1") renameOnLoad("fc1.", first + ".");
  if (second != "fc2") renameOnLoad("fc2.", second + ".");
}

namespace {

// conv -> pool -> relu as one op (autograd::conv2dMaxPool2d): the same values and gradients as
// the three modules, with the convolution's output never materialized for the whole batch.
Variable convPoolRelu(Conv2d& conv, const MaxPool2d& pool, const Variable& x) {
  return autograd::conv2dMaxPool2d(x, conv.weight(), conv.bias(), conv.functionalOptions(), pool.options(),
                                   true);
}

Variable flattenLinearRelu(Flatten& flatten, Linear& fc, const Variable& x) {
  return autograd::relu(fc.forward(flatten.forward(x)));
}

}  // namespace

Variable SmallCnn::forward(const Variable& input) {
  Variable x = convPoolRelu(*conv1_, *pool_, toChannelsLast(input));
  x = convPoolRelu(*conv2_, *pool_, x);
  x = conv3_->forward(x);
  return fc2_->forward(flattenLinearRelu(*flatten_, *fc1_, x));
}

NamedModules SmallCnn::sequenceLayers() {
  auto pool = pool_;
  auto conv_pool = [&pool](const std::string& name, const std::shared_ptr<Conv2d>& conv, bool first) {
    return std::make_shared<SequenceLayer>("Conv2dMaxPool2d", NamedModules{{name, conv}, {"pool", pool}},
                                           [conv, pool, first](Module&, const Variable& x) {
                                             return convPoolRelu(*conv, *pool, first ? toChannelsLast(x) : x);
                                           });
  };
  // The linear layers' names are the options' (dense1 or linear1, ...).
  auto name_of = [this](const std::shared_ptr<Module>& m) {
    for (const auto& [name, child] : namedChildren())
      if (child == m) return name;
    LOCKSTEP_CHECK(false, "a SmallCnn layer is not its child", typeName());
    return std::string();
  };
  const std::string fc1_name = name_of(fc1_), fc2_name = name_of(fc2_);
  auto flatten = flatten_;
  auto fc1 = fc1_;
  auto dense = std::make_shared<SequenceLayer>(
      "Linear", NamedModules{{"flatten", flatten}, {fc1_name, fc1}},
      [flatten, fc1](Module&, const Variable& x) { return flattenLinearRelu(*flatten, *fc1, x); });
  return {{"conv1", conv_pool("conv1", conv1_, true)},
          {"conv2", conv_pool("conv2", conv2_, false)},
          {"conv3", conv3_},
          {fc1_name, dense},
          {fc2_name, fc2_}};
}

}  // namespace lockstep::nn
