#pragma once
// Which implementation computes an op. Each op group lists its ops once (LOCKSTEP_<GROUP>_OPS in
// kernels/tables/<group>.h), which makes its table of function pointers (e.g. BinaryKernels); each
// backend provides that table, with a null entry where it has no kernel for an op:
//   onednn     kernels/dnnl/       oneDNN primitives: f32, and bf16/f16 natively where the CPU has them
//   cpu        kernels/cpu/        lockstep's own f32 loops, where they beat oneDNN or it has no primitive
//   reference  kernels/reference/  plain loops in every dtype: f64 (oneDNN has no f64; the gradient tests
//                                  run in f64), LOCKSTEP_KERNELS=reference, and the tests' oracle
//   cuda       kernels/cuda/       tensors on a GPU (built with LOCKSTEP_CUDA)
// dispatch() below picks one for a call from (device, dtype): the only place that does.
//
// Low precision (bf16, f16): oneDNN 2.6 computes bf16 only on CPUs with AVX-512 (natively with
// avx512_core_bf16 or AMX) and f16 only with avx512_core_fp16. Where the CPU or the kernel has no
// such path, the op runs emulated: its low-precision operands are widened to f32, the f32 kernel
// runs, and its floating results are rounded back. That is the same arithmetic the native kernels
// do (low-precision inputs, f32 accumulation, a rounded output), only not faster than f32.
// LOCKSTEP_LOW_PRECISION=emulated forces the emulation (to compare the paths on one machine).
#include <atomic>
#include <string>
#include <type_traits>
#include <utility>

#include "lockstep/tensor/tensor.h"

/// The CUDA backend's table for a Backends<> set: &cuda::kX in a build with CUDA, else null (no
/// tensor can live on a GPU then).
#if LOCKSTEP_WITH_CUDA
#define LOCKSTEP_CUDA_TABLE(table) (&(table))
#else
#define LOCKSTEP_CUDA_TABLE(table) nullptr
#endif

namespace lockstep::kernels {

enum class Backend { onednn, reference };

/// The backend for an op whose main operand has dtype t.
Backend backendFor(DType t);

/// bf16 and f16: storage dtypes the kernels compute with f32 accumulation.
inline bool isLowPrecision(DType t) { return t == DType::bf16 || t == DType::f16; }

/// Whether ops on dtype t run on native kernels here (always true for f32/f64; for bf16/f16, when
/// oneDNN has kernels for them on this CPU and LOCKSTEP_LOW_PRECISION does not say "emulated").
bool computesNatively(DType t);

/// The instruction set oneDNN dispatches to on this machine: "avx2", "avx512_core_bf16",
/// "avx512_core_amx", ... (dnnl_get_effective_cpu_isa).
std::string kernelIsa();

/// oneDNN's version, "2.6.3".
std::string kernelLibraryVersion();

/// One line for logs and benchmarks: "bf16 native (oneDNN avx512_core_bf16)" or
/// "bf16 emulated in f32 (oneDNN has no bf16 kernels for avx2)".
std::string precisionPath(DType t);

namespace detail {
inline Tensor widen(const Tensor& t, DType low) {
  return t.defined() && t.dtype() == low ? t.to(DType::f32) : t;
}
/// Every other argument passes through as it is (a Generator& stays mutable).
template <typename A>
auto widen(A&& a, DType) -> std::enable_if_t<!std::is_same_v<std::remove_cvref_t<A>, Tensor>, A&&> {
  return std::forward<A>(a);
}

inline void narrow(Tensor& t, DType low) {
  if (t.defined() && t.dtype() == DType::f32) t = t.to(low);
}
inline void narrow(std::pair<Tensor, Tensor>& p, DType low) {
  narrow(p.first, low);
  narrow(p.second, low);
}
/// Result structs (Conv2dWeightGrads, MaxPool2dResult, ...) say which of their members are
/// floating results by a narrowResults(r, low) overload found by argument-dependent lookup.
template <typename R>
auto narrow(R& r, DType low) -> decltype(narrowResults(r, low)) {
  narrowResults(r, low);
}

template <typename Fn, typename... Args>
auto inF32(DType low, Fn fn, Args&&... args) {
  if constexpr (std::is_void_v<decltype(fn(widen(args, low)...))>) {
    fn(widen(args, low)...);
  } else {
    auto r = fn(widen(args, low)...);
    narrow(r, low);
    return r;
  }
}
}  // namespace detail

/// The tables one op group's backends provide; a backend without any kernel of the group is null.
template <typename Table>
struct Backends {
  const Table* onednn = nullptr;
  const Table* cpu = nullptr;
  const Table* reference = nullptr;
  const Table* cuda = nullptr;
  /// The cpu loops take bf16/f16 operands as they are, widening them block by block to compute
  /// exactly what the emulation computes (whole f32 copies, the f32 loop, rounding), without the
  /// copies: where oneDNN has no kernel for the op they run in place of the emulation.
  bool cpu_takes_low_precision = false;
};

/// Where a call computes: the device its tensors live on and the dtype it computes in.
struct Where {
  bool cuda;
  DType dtype;
  Where(const Tensor& t) : cuda(t.isCuda()), dtype(t.dtype()) {}  // NOLINT: the usual case, implicit
  Where(bool on_cuda, DType t) : cuda(on_cuda), dtype(t) {}
  Where(Device device, DType t) : cuda(device.isCuda()), dtype(t) {}
};

namespace detail {
template <typename M>
struct TableOf;
template <typename Fn, typename T>
struct TableOf<Fn T::*> {
  using type = T;
};

template <auto Op, typename Table>
auto entry(const Table* table) -> std::remove_cvref_t<decltype(std::declval<Table>().*Op)> {
  return table ? table->*Op : nullptr;
}

/// The CUDA backend's kernel for Op; an op it lacks is an error (the CPU kernels cannot read device
/// memory).
template <auto Op, typename Table>
auto cudaKernel(const Backends<Table>& backends) {
  const auto fn = entry<Op>(backends.cuda);
  LOCKSTEP_ENFORCE(fn != nullptr, NotSupportedError, Table::kGroup,
                   ": the CUDA backend has no kernel for this op; move the tensors to the CPU with to()");
  return fn;
}

/// Runs fn, for a low-precision t emulated in f32.
template <typename Fn, typename... Args>
auto runOrEmulate(DType t, Fn fn, Args&&... args) {
  if (isLowPrecision(t)) return inF32(t, fn, args...);
  return fn(args...);
}
}  // namespace detail

/// Runs op `Op` (a member of the group's table, e.g. &BinaryKernels::binary) on the backend that
/// (device, dtype) selects:
/// - a GPU tensor: the CUDA table's kernel (which computes every dtype itself);
/// - LOCKSTEP_KERNELS=reference or f64: the reference loops (else the cpu loops where the op has no
///   reference), low precision emulated in f32;
/// - f32 with an own cpu loop: the cpu loop;
/// - otherwise oneDNN; for a low-precision t emulated in f32 where the native kernel is missing. A
///   native low-precision kernel that oneDNN turns out not to implement (NotSupportedError at
///   primitive creation) falls back to emulation, and from then on that kernel runs emulated
///   without trying again;
/// - an op oneDNN lacks: the cpu loops, else the reference, low precision emulated in f32 (by the
///   cpu loops themselves where backends.cpu_takes_low_precision).
template <auto Op, typename Table = typename detail::TableOf<decltype(Op)>::type, typename... Args>
auto dispatch(const Backends<Table>& backends, Where where, Args&&... args) {
  const DType t = where.dtype;
  if (where.cuda) return detail::cudaKernel<Op>(backends)(args...);
  const auto fast = detail::entry<Op>(backends.onednn), own = detail::entry<Op>(backends.cpu),
             ref = detail::entry<Op>(backends.reference);
  if (backendFor(t) == Backend::reference) {
    const auto fn = ref ? ref : own;
    LOCKSTEP_CHECK(fn != nullptr, Table::kGroup, ": an op with neither a reference nor a cpu kernel");
    return detail::runOrEmulate(t, fn, args...);
  }
  if (own && t == DType::f32) return own(args...);
  if (fast) {
    if (!isLowPrecision(t)) return fast(args...);
    static std::atomic<bool> unimplemented{false};
    if (computesNatively(t) && !unimplemented.load(std::memory_order_relaxed)) {
      try {
        return fast(args...);
      } catch (const NotSupportedError&) {
        unimplemented.store(true, std::memory_order_relaxed);
      }
    }
    return detail::inF32(t, fast, args...);
  }
  if (own && isLowPrecision(t) && backends.cpu_takes_low_precision) return own(args...);
  const auto fn = own ? own : ref;
  LOCKSTEP_CHECK(fn != nullptr, Table::kGroup, ": an op no CPU backend provides");
  return detail::runOrEmulate(t, fn, args...);
}

/// As dispatch(), for ops whose kernels take every dtype as it is: layout changes, and the loops
/// that widen low precision themselves (optimizer steps, checks, in-place updates). Nothing is
/// emulated: a GPU tensor takes the CUDA kernel; LOCKSTEP_KERNELS=reference or f64 the reference
/// (else the cpu loops); f32 the cpu loops (else oneDNN, else the reference); other dtypes oneDNN
/// (else the cpu loops, which then see the dtype as it is, else the reference).
template <auto Op, typename Table = typename detail::TableOf<decltype(Op)>::type, typename... Args>
auto dispatchAsIs(const Backends<Table>& backends, Where where, Args&&... args) {
  if (where.cuda) return detail::cudaKernel<Op>(backends)(args...);
  const auto fast = detail::entry<Op>(backends.onednn), own = detail::entry<Op>(backends.cpu),
             ref = detail::entry<Op>(backends.reference);
  auto fn = fast ? fast : own ? own : ref;
  if (backendFor(where.dtype) == Backend::reference) {
    fn = ref ? ref : own;
  } else if (own && where.dtype == DType::f32) {
    fn = own;
  }
  LOCKSTEP_CHECK(fn != nullptr, Table::kGroup, ": an op no CPU backend provides");
  return fn(args...);
}

}  // namespace lockstep::kernels
