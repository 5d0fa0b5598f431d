#include "lockstep/kernels/dispatch.h"

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

}  // namespace lockstep::kernels
