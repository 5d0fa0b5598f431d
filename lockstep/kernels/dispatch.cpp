#include "lockstep/kernels/dispatch.h"

#include <dnnl.hpp>

#include "lockstep/kernels/dnnl/context.h"
#include "lockstep/util/env.h"

namespace lockstep::kernels {

Backend backendFor(DType t) {
  static const bool force_reference = [] {
    auto v = env::get("LOCKSTEP_KERNELS");
    if (!v || v->empty() || *v == "onednn") return false;
    LOCKSTEP_ENFORCE(*v == "reference", ValueError, "LOCKSTEP_KERNELS='", *v,
                     "' is not a kernel backend; use 'onednn' (default) or 'reference'");
    return true;
  }();
  if (force_reference || t == DType::f64) return Backend::reference;
  return Backend::onednn;
}

namespace {
bool forceEmulation() {
  static const bool force = [] {
    auto v = env::get("LOCKSTEP_LOW_PRECISION");
    if (!v || v->empty() || *v == "native") return false;
    LOCKSTEP_ENFORCE(*v == "emulated", ValueError, "LOCKSTEP_LOW_PRECISION='", *v,
                     "' is not a low-precision path; use 'native' (default: native kernels where the CPU "
                     "has them) or 'emulated' (always compute in f32 and round)");
    return true;
  }();
  return force;
}
}  // namespace

bool computesNatively(DType t) {
  if (!isLowPrecision(t)) return true;
  if (forceEmulation() || backendFor(t) == Backend::reference) return false;
  static const bool bf16 = onednn::supportsDtype(DType::bf16);
  static const bool f16 = onednn::supportsDtype(DType::f16);
  return t == DType::bf16 ? bf16 : f16;
}

std::string kernelIsa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "unknown";
  }
}

std::string kernelLibraryVersion() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string precisionPath(DType t) {
  const std::string name = dtypeName(t);
  if (!isLowPrecision(t)) return name + " native (oneDNN " + kernelIsa() + ")";
  if (computesNatively(t)) return name + " native (oneDNN " + kernelIsa() + ")";
  if (forceEmulation()) return name + " emulated in f32 (LOCKSTEP_LOW_PRECISION=emulated)";
  if (backendFor(t) == Backend::reference) return name + " emulated in f32 (reference kernels)";
  return name + " emulated in f32 (oneDNN has no " + name + " kernels for " + kernelIsa() + ")";
}

}  // namespace lockstep::kernels
