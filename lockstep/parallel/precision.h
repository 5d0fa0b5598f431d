#pragma once
// The precision a training step computes in (DeepSpeed's bf16 / fp16 sections, Accelerate's
// mixed_precision): fp32, or autocast in bf16 or fp16 with f32 parameters, gradients and
// optimizer states. Names are parsed only where text comes in (flags, the config).
#include <optional>
#include <string>
#include <vector>

#include "lockstep/autograd/variable.h"
#include "lockstep/tensor/tensor.h"
#include "lockstep/util/dtype.h"

namespace lockstep::parallel {

enum class Precision { fp32, bf16, fp16 };

/// "fp32", "bf16" or "fp16"; ValueError naming the text and the names otherwise. Pure.
Precision parsePrecision(const std::string& name);
/// The name parsePrecision takes ("fp32", "bf16", "fp16"), as summary.json records it.
const char* precisionName(Precision precision);
/// The names parsePrecision knows, in order: fp32, bf16, fp16 (flags list these).
const std::vector<std::string>& precisionNames();
/// The autocast dtype: nullopt for fp32, bf16, f16. Pure.
std::optional<DType> precisionDType(Precision precision);
/// Rounds each of `values` in place to `dtype` and back to its own dtype: DeepSpeed's bf16 and fp16
/// sections cast the module to 16 bits before the optimizer takes its f32 master weights from it,
/// so the run starts from the rounded values (EngineOptions::round_initial_parameters).
void roundInPlace(const std::vector<Tensor>& values, DType dtype);
/// The same for the parameters' values.
void roundInPlace(const std::vector<autograd::Variable>& params, DType dtype);

}  // namespace lockstep::parallel
