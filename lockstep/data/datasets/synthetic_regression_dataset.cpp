#include "lockstep/data/datasets/synthetic_regression_dataset.h"

#include <cmath>

#include "lockstep/tensor/generator.h"

namespace lockstep::data {

namespace {
struct Teacher {
  Tensor weight, bias;
};

Teacher makeTeacher(const SyntheticRegressionOptions& o, Generator& gen) {
  LOCKSTEP_ENFORCE(o.size >= 0 && o.in_features >= 1 && o.out_features >= 1 && o.noise_std >= 0, ValueError,
                   "SyntheticRegressionDataset: need size >= 0, features >= 1 and noise_std >= 0, got size ",
                   o.size, ", in ", o.in_features, ", out ", o.out_features, ", noise_std ", o.noise_std);
  Teacher t{Tensor::empty({o.out_features, o.in_features}, DType::f32),
            Tensor::empty({o.out_features}, DType::f32)};
  gen.normal(t.weight, 0.0, 1.0 / std::sqrt(static_cast<double>(o.in_features)));
  gen.normal(t.bias, 0.0, 1.0);
  return t;
}

TensorDataset build(const SyntheticRegressionOptions& o) {
  Generator gen(o.seed);
  Teacher t = makeTeacher(o, gen);
  Tensor x = Tensor::empty({o.size, o.in_features}, DType::f32);
  gen.uniform(x, 0.0, 1.0);
  Tensor y = Tensor::empty({o.size, o.out_features}, DType::f32);
  gen.normal(y, 0.0, o.noise_std);
  const float* px = x.data<float>();
  const float* w = t.weight.data<float>();
  const float* b = t.bias.data<float>();
  float* py = y.data<float>();
  for (int64_t i = 0; i < o.size; ++i) {
    for (int64_t j = 0; j < o.out_features; ++j) {
      double s = b[j];
      for (int64_t k = 0; k < o.in_features; ++k)
        s += static_cast<double>(w[j * o.in_features + k]) * px[i * o.in_features + k];
      py[i * o.out_features + j] += static_cast<float>(s);
    }
  }
  return TensorDataset(std::move(x), std::move(y));
}
}  // namespace

SyntheticRegressionDataset::SyntheticRegressionDataset(const SyntheticRegressionOptions& options)
    : TensorDataset(build(options)), options_(options) {
  Generator gen(options.seed);
  Teacher t = makeTeacher(options, gen);
  weight_ = std::move(t.weight);
  bias_ = std::move(t.bias);
}

}  // namespace lockstep::data
