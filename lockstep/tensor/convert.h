#pragma once
// Bulk conversions between f32 and the 16-bit floats, element for element the same as BFloat16's
// and Half's own (util/dtype.h: round to nearest even; a NaN stays a NaN, its payload bits may
// differ), but vectorised: mixed precision (autocast, the emulated kernels) casts whole activations
// every step. The f16 ones use the CPU's F16C instructions when it has them. Thread-safe.
#include <cstdint>

namespace lockstep {

void convertF32ToBF16(const float* src, uint16_t* dst, int64_t n);
void convertBF16ToF32(const uint16_t* src, float* dst, int64_t n);
void convertF32ToF16(const float* src, uint16_t* dst, int64_t n);
void convertF16ToF32(const uint16_t* src, float* dst, int64_t n);

}  // namespace lockstep
