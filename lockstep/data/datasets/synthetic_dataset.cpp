#include "lockstep/data/datasets/synthetic_dataset.h"

#include "lockstep/tensor/generator.h"

namespace lockstep::data {

namespace {
Tensor makeTeacher(const SyntheticDatasetOptions& o, Generator& gen) {
  Tensor teacher = Tensor::empty({o.num_classes, shapeNumel(o.input_shape)}, DType::f32);
  gen.normal(teacher, 0.0, 1.0);
  return teacher;
}

TensorDataset build(const SyntheticDatasetOptions& o) {
  LOCKSTEP_ENFORCE(o.size >= 0, ValueError, "SyntheticDataset: size must be >= 0, got ", o.size);
  LOCKSTEP_ENFORCE(o.num_classes >= 2, ValueError, "SyntheticDataset: num_classes must be >= 2, got ",
                   o.num_classes);
  LOCKSTEP_ENFORCE(!o.input_shape.empty(), ValueError, "SyntheticDataset: input_shape must not be empty");
  for (int64_t d : o.input_shape) {
    LOCKSTEP_ENFORCE(d > 0, ValueError, "SyntheticDataset: bad input_shape ", shapeToString(o.input_shape));
  }
  const int64_t features = shapeNumel(o.input_shape);
  Generator gen(o.seed);
  Tensor teacher = makeTeacher(o, gen);
  Shape shape = o.input_shape;
  shape.insert(shape.begin(), o.size);
  Tensor inputs = Tensor::empty(shape, DType::f32);
  gen.normal(inputs, 0.0, 1.0);
  Tensor labels = Tensor::empty({o.size}, DType::i64);
  const float* x = inputs.data<float>();
  const float* w = teacher.data<float>();
  int64_t* y = labels.data<int64_t>();
  for (int64_t i = 0; i < o.size; ++i) {
    int64_t best = 0;
    double best_score = 0;
    for (int64_t c = 0; c < o.num_classes; ++c) {
      double s = 0;
      for (int64_t f = 0; f < features; ++f)
        s += static_cast<double>(w[c * features + f]) * x[i * features + f];
      if (c == 0 || s > best_score) {
        best = c;
        best_score = s;
      }
    }
    y[i] = best;
  }
  return TensorDataset(std::move(inputs), std::move(labels));
}
}  // namespace

SyntheticDataset::SyntheticDataset(const SyntheticDatasetOptions& options)
    : TensorDataset(build(options)), options_(options) {
  Generator gen(options.seed);  // the teacher is the generator's first draw, see build()
  teacher_ = makeTeacher(options, gen);
}

}  // namespace lockstep::data
