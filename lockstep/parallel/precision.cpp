#include "lockstep/parallel/precision.h"

#include "lockstep/util/error.h"

namespace lockstep::parallel {

Precision parsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  throw ValueError("precision '" + name + "' is not one of fp32, bf16, fp16");
}

void roundInPlace(const std::vector<Tensor>& values, DType dtype) {
  for (const Tensor& t : values) {
    if (t.defined() && t.numel() > 0 && t.dtype() != dtype) Tensor(t).copyFrom(t.to(dtype));
  }
}

void roundInPlace(const std::vector<autograd::Variable>& params, DType dtype) {
  std::vector<Tensor> values;
  for (const autograd::Variable& p : params) values.push_back(p.tensor());
  roundInPlace(values, dtype);
}

const char* precisionName(Precision precision) {
  return precisionNames()[static_cast<size_t>(precision)].c_str();
}

const std::vector<std::string>& precisionNames() {
  static const std::vector<std::string> names{"fp32", "bf16", "fp16"};
  return names;
}

std::optional<DType> precisionDType(Precision precision) {
  if (precision == Precision::bf16) return DType::bf16;
  if (precision == Precision::fp16) return DType::f16;
  return std::nullopt;
}

}  // namespace lockstep::parallel
