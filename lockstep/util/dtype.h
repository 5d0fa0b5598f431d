#pragma once
// Lives in util/ (not tensor/) because comm/ moves typed buffers without knowing tensors, and
// both must speak of the same element types.
// Element types. bf16 and f16 are storage types for now: they convert to and from f32 exactly as
// IEEE/bfloat16 define (round to nearest even); compute on them comes later.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace lockstep {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, u8 };

/// Bytes per element.
size_t dtypeSize(DType t);
/// "f32", "f64", ... as used in messages and in safetensors-style metadata.
const char* dtypeName(DType t);
/// Inverse of dtypeName; ValueError on an unknown name.
DType dtypeFromName(const std::string& name);
bool isFloating(DType t);

/// bfloat16: the upper 16 bits of an IEEE float32.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

/// IEEE 754 binary16.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <typename T>
inline constexpr DType dtypeOf = DTypeOf<T>::value;

/// Calls fn(T{}) with T the C++ type of dtype t: LOCKSTEP_DISPATCH-style visitor.
template <typename Fn>
decltype(auto) visitDType(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    case DType::bf16:
      return fn(BFloat16{});
    case DType::f16:
      return fn(Half{});
    case DType::i32:
      return fn(int32_t{});
    case DType::i64:
      return fn(int64_t{});
    case DType::u8:
      return fn(uint8_t{});
  }
  return fn(float{});
}

}  // namespace lockstep
