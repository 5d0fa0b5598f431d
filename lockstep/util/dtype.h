#pragma once
// Lives in util/ (not tensor/) because comm/ moves typed buffers without knowing tensors, and
// both must speak of the same element types.
// Element types. bf16 and f16 are storage types for now: they convert to and from f32 exactly as
// IEEE/bfloat16 define (round to nearest even); compute on them comes later.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

namespace lockstep {

/// Every element type once: X(name, host C++ type, bytes, floating). The enum, dtypeSize,
/// dtypeName, isFloating, dtypeOf and the visitors are all made from this list (ggml's
/// type_traits table), so a new dtype is one line here plus its arithmetic.
#define LOCKSTEP_DTYPES(X)   \
  X(f32, float, 4, true)     \
  X(f64, double, 8, true)    \
  X(bf16, BFloat16, 2, true) \
  X(f16, Half, 2, true)      \
  X(i32, int32_t, 4, false)  \
  X(i64, int64_t, 8, false)  \
  X(u8, uint8_t, 1, false)

#define LOCKSTEP_DTYPE_ENUMERATOR(name, type, bytes, floating) name,
enum class DType : uint8_t { LOCKSTEP_DTYPES(LOCKSTEP_DTYPE_ENUMERATOR) };
#undef LOCKSTEP_DTYPE_ENUMERATOR

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

/// The host C++ type of each dtype (HostType<DType::f32>::type is float) and back (dtypeOf<float>).
template <DType D>
struct HostType;
template <typename T>
struct DTypeOf;
#define LOCKSTEP_DTYPE_TRAITS(name, host, bytes, floating) \
  template <>                                              \
  struct HostType<DType::name> {                           \
    using type = host;                                     \
  };                                                       \
  template <>                                              \
  struct DTypeOf<host> {                                   \
    static constexpr DType value = DType::name;            \
  };
LOCKSTEP_DTYPES(LOCKSTEP_DTYPE_TRAITS)
#undef LOCKSTEP_DTYPE_TRAITS
template <typename T>
inline constexpr DType dtypeOf = DTypeOf<T>::value;

/// Calls fn(T{}) with T = TypeOf<t>::type: the one switch over dtypes that every visitor shares
/// (the host's below, the CUDA kernels' visitDeviceType with __half and __nv_bfloat16).
template <template <DType> class TypeOf, typename Fn>
decltype(auto) visitDTypeAs(DType t, Fn&& fn) {
  switch (t) {
#define LOCKSTEP_DTYPE_CASE(name, host, bytes, floating) \
  case DType::name:                                      \
    return fn(typename TypeOf<DType::name>::type{});
    LOCKSTEP_DTYPES(LOCKSTEP_DTYPE_CASE)
#undef LOCKSTEP_DTYPE_CASE
  }
  return fn(typename TypeOf<DType::f32>::type{});
}

/// Calls fn(T{}) with T the host C++ type of dtype t: LOCKSTEP_DISPATCH-style visitor.
template <typename Fn>
decltype(auto) visitDType(DType t, Fn&& fn) {
  return visitDTypeAs<HostType>(t, std::forward<Fn>(fn));
}

}  // namespace lockstep
