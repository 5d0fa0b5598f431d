#include "lockstep/util/dtype.h"

#include "lockstep/util/error.h"

namespace lockstep {

size_t dtypeSize(DType t) {
  switch (t) {
#define LOCKSTEP_DTYPE_SIZE(name, host, bytes, floating) \
  case DType::name:                                      \
    return bytes;
    LOCKSTEP_DTYPES(LOCKSTEP_DTYPE_SIZE)
#undef LOCKSTEP_DTYPE_SIZE
  }
  LOCKSTEP_CHECK(false, "unknown dtype ", static_cast<int>(t));
}

const char* dtypeName(DType t) {
  switch (t) {
#define LOCKSTEP_DTYPE_NAME(name, host, bytes, floating) \
  case DType::name:                                      \
    return #name;
    LOCKSTEP_DTYPES(LOCKSTEP_DTYPE_NAME)
#undef LOCKSTEP_DTYPE_NAME
  }
  return "?";
}

DType dtypeFromName(const std::string& name) {
  std::string known;
#define LOCKSTEP_DTYPE_FROM_NAME(dtype, host, bytes, floating) \
  if (name == #dtype) return DType::dtype;                     \
  known += known.empty() ? #dtype : ", " #dtype;
  LOCKSTEP_DTYPES(LOCKSTEP_DTYPE_FROM_NAME)
#undef LOCKSTEP_DTYPE_FROM_NAME
  throw ValueError("unknown dtype '" + name + "'; expected one of " + known);
}

bool isFloating(DType t) {
  switch (t) {
#define LOCKSTEP_DTYPE_FLOATING(name, host, bytes, floating) \
  case DType::name:                                          \
    return floating;
    LOCKSTEP_DTYPES(LOCKSTEP_DTYPE_FLOATING)
#undef LOCKSTEP_DTYPE_FLOATING
  }
  return false;
}

Half::Half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    bits = static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
    return;
  }
  if (absx >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (absx < 0x38800000u) {  // subnormal or zero in half
    // value = absx as float; half subnormal unit is 2^-24.
    float a;
    std::memcpy(&a, &absx, 4);
    float scaled = a * 16777216.0f;  // 2^24, exact
    // round to nearest even
    uint32_t m = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    bits = static_cast<uint16_t>(sign | m);
    return;
  }
  uint32_t exp = ((absx >> 23) - 127 + 15) << 10;
  uint32_t mant = absx & 0x7fffffu;
  uint32_t h = exp | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  bits = static_cast<uint16_t>(sign | h);
}

Half::operator float() const {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    float f = static_cast<float>(mant) * (1.0f / 16777216.0f);
    std::memcpy(&out, &f, 4);
    out |= sign;
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

}  // namespace lockstep
