#pragma once
// Element-wise activation layers (no parameters): ReLU, LeakyReLU, GELU (exact erf form), Tanh,
// Sigmoid; and Flatten, which reshapes [N, ...] to [N, prod(...)] (torch.nn.Flatten).
#include <cstdint>

#include "lockstep/nn/module.h"

namespace lockstep::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Variable forward(const Variable& x) override;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : Module("LeakyReLU"), negative_slope_(negative_slope) {}
  Variable forward(const Variable& x) override;
  std::string extraRepr() const override;
  double negativeSlope() const { return negative_slope_; }

 private:
  double negative_slope_;
};

class GELU : public Module {
 public:
  GELU() : Module("GELU") {}
  Variable forward(const Variable& x) override;
};

class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Variable forward(const Variable& x) override;
};

class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Variable forward(const Variable& x) override;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}
  Variable forward(const Variable& x) override;
  std::string extraRepr() const override;

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};

}  // namespace lockstep::nn
