#pragma once
// Parameter initialisers (torch.nn.init), all drawing from a Generator so that a seed fixes every
// value. Each fills its tensor in place. Fan computation follows PyTorch's
// _calculate_fan_in_and_fan_out: fan_in = size(1) * receptive field, fan_out = size(0) * receptive.
#include <cstdint>
#include <string>
#include <utility>

#include "lockstep/tensor/generator.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::nn::init {

enum class FanMode { fan_in, fan_out };

/// {fan_in, fan_out} of a weight of at least 2 dims (ValueError otherwise).
std::pair<int64_t, int64_t> computeFans(const Shape& shape);
/// torch.nn.init.calculate_gain: "linear", "conv2d", "sigmoid" -> 1, "tanh" -> 5/3, "relu" -> sqrt(2),
/// "leaky_relu" -> sqrt(2 / (1 + param^2)), "selu" -> 3/4.
double calculateGain(const std::string& nonlinearity, double param = 0.01);

/// U[low, high).
void uniform(Tensor& t, double low, double high, Generator& gen = defaultGenerator());
/// N(mean, std^2).
void normal(Tensor& t, double mean, double std, Generator& gen = defaultGenerator());
void constant(Tensor& t, double value);
/// U(-b, b) with b = gain * sqrt(3 / fan), gain = calculateGain(nonlinearity, a). With a = sqrt(5),
/// fan_in mode and "leaky_relu" (the defaults of nn.Linear/nn.Conv2d) b = 1/sqrt(fan_in).
void kaimingUniform(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                    const std::string& nonlinearity = "leaky_relu", Generator& gen = defaultGenerator());
/// N(0, std^2) with std = gain / sqrt(fan).
void kaimingNormal(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                   const std::string& nonlinearity = "leaky_relu", Generator& gen = defaultGenerator());
/// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
void xavierUniform(Tensor& t, double gain = 1.0, Generator& gen = defaultGenerator());

/// The bound PyTorch's default reset_parameters() uses for both the weight (kaiming_uniform with
/// a = sqrt(5)) and the bias of Linear/Conv layers: 1/sqrt(fan_in) (0 when fan_in is 0).
double defaultBound(int64_t fan_in);

}  // namespace lockstep::nn::init
