#pragma once
// cuBLASLt, opened when the first GEMM runs on a GPU rather than when the process starts (built with
// LOCKSTEP_CUDA only). Linking libcublasLt costs every process about 150 MiB of resident memory at
// load (its relocations), CPU-only ranks included; opened on first use, only GPU runs pay it.
//   const CublasLt& lt = cublasLt();   // Error naming the library and LD_LIBRARY_PATH if absent
//   lt.cublasLtMatmul(handle, desc, ...);
#include <cublasLt.h>

namespace lockstep::kernels::cuda {

// clang-format off
#define LOCKSTEP_CUBLASLT_FUNCTIONS(X) \
  X(cublasLtCreate) \
  X(cublasLtGetStatusName) \
  X(cublasLtGetStatusString) \
  X(cublasLtMatmul) \
  X(cublasLtMatmulAlgoGetHeuristic) \
  X(cublasLtMatmulDescCreate) \
  X(cublasLtMatmulDescDestroy) \
  X(cublasLtMatmulDescSetAttribute) \
  X(cublasLtMatmulPreferenceCreate) \
  X(cublasLtMatmulPreferenceDestroy) \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatrixLayoutCreate) \
  X(cublasLtMatrixLayoutDestroy) \
  X(cublasLtMatrixLayoutSetAttribute)
// clang-format on

/// The cuBLASLt entry points lockstep calls, each with the library's own signature.
struct CublasLt {
#define LOCKSTEP_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  LOCKSTEP_CUBLASLT_FUNCTIONS(LOCKSTEP_CUBLASLT_MEMBER)
#undef LOCKSTEP_CUBLASLT_MEMBER
};

/// The library, opened on the first call (by its soname, so LD_LIBRARY_PATH and the system's
/// library cache apply, then from the toolkit lockstep was built with). Thread-safe. Error naming
/// the library, dlopen's reason and what to do when it cannot be opened or lacks an entry point.
const CublasLt& cublasLt();

}  // namespace lockstep::kernels::cuda
