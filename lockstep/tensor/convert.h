#pragma once
// Bulk conversions between f32 and the 16-bit floats, element for element the same as BFloat16's
// and Half's own (util/dtype.h: round to nearest even; a NaN stays a NaN, its payload bits may
// differ), but vectorised: mixed precision (autocast, the emulated kernels) casts whole activations
// every step. The bf16 ones are cloned for AVX-512 and AVX2, the f16 ones use the CPU's F16C
// instructions when it has them; conversions of many elements (2^19 and more) outside a parallel
// region are split across the OpenMP threads. Thread-safe.
#include <cstdint>

namespace lockstep {

void convertF32ToBF16(const float* src, uint16_t* dst, int64_t n);
void convertBF16ToF32(const uint16_t* src, float* dst, int64_t n);
void convertF32ToF16(const float* src, uint16_t* dst, int64_t n);
void convertF16ToF32(const uint16_t* src, float* dst, int64_t n);

/// The two conversions of one 16-bit format, for loops that widen blocks into f32 and round back.
struct Convert16 {
  void (*widen)(const uint16_t* src, float* dst, int64_t n);
  void (*narrow)(const float* src, uint16_t* dst, int64_t n);
};
/// bf16's pair when bf16, else f16's.
inline Convert16 convert16(bool bf16) {
  return bf16 ? Convert16{convertBF16ToF32, convertF32ToBF16} : Convert16{convertF16ToF32, convertF32ToF16};
}

}  // namespace lockstep
