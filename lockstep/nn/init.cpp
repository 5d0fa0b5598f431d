#include "lockstep/nn/init.h"

#include <cmath>

namespace lockstep::nn::init {

std::pair<int64_t, int64_t> computeFans(const Shape& shape) {
  LOCKSTEP_ENFORCE(shape.size() >= 2, ValueError,
                   "fan in and fan out need a tensor of at least 2 dims, got shape ", shapeToString(shape));
  int64_t receptive = 1;
  for (size_t i = 2; i < shape.size(); ++i) receptive *= shape[i];
  return {shape[1] * receptive, shape[0] * receptive};
}

double calculateGain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "conv1d" || nonlinearity == "conv2d" ||
      nonlinearity == "conv3d" || nonlinearity == "sigmoid") {
    return 1.0;
  }
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  throw ValueError("calculateGain: unsupported nonlinearity '" + nonlinearity +
                   "' (linear, conv2d, sigmoid, tanh, relu, leaky_relu, selu)");
}

void uniform(Tensor& t, double low, double high, Generator& gen) { gen.uniform(t, low, high); }

void normal(Tensor& t, double mean, double std, Generator& gen) { gen.normal(t, mean, std); }

void constant(Tensor& t, double value) { t.fill(value); }

namespace {
double kaimingStd(const Tensor& t, double a, FanMode mode, const std::string& nonlinearity) {
  auto [fan_in, fan_out] = computeFans(t.shape());
  const int64_t fan = mode == FanMode::fan_in ? fan_in : fan_out;
  LOCKSTEP_ENFORCE(fan > 0, ValueError, "kaiming init of a tensor with zero fan: shape ",
                   shapeToString(t.shape()));
  return calculateGain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
}
}  // namespace

void kaimingUniform(Tensor& t, double a, FanMode mode, const std::string& nonlinearity, Generator& gen) {
  const double bound = std::sqrt(3.0) * kaimingStd(t, a, mode, nonlinearity);
  gen.uniform(t, -bound, bound);
}

void kaimingNormal(Tensor& t, double a, FanMode mode, const std::string& nonlinearity, Generator& gen) {
  gen.normal(t, 0.0, kaimingStd(t, a, mode, nonlinearity));
}

void xavierUniform(Tensor& t, double gain, Generator& gen) {
  auto [fan_in, fan_out] = computeFans(t.shape());
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  gen.uniform(t, -bound, bound);
}

double defaultBound(int64_t fan_in) {
  return fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
}

}  // namespace lockstep::nn::init
