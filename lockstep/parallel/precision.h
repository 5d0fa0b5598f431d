#pragma once
// The precision a training step computes in (DeepSpeed's bf16 / fp16 sections, Accelerate's
// mixed_precision): fp32, or autocast in bf16 or fp16 with f32 parameters, gradients and
// optimizer states. Names are parsed only where text comes in (flags, the config).
#include <optional>
#include <string>
#include <vector>

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

}  // namespace lockstep::parallel
