#include "lockstep/kernels/cuda/cublaslt.h"

#include <cublas_api.h>
#include <dlfcn.h>

#include <string>

#include "lockstep/util/error.h"

#ifndef LOCKSTEP_CUBLASLT_SONAME
#error "the build names cuBLASLt's soname (cmake/LockstepCuda.cmake)"
#endif

namespace lockstep::kernels::cuda {

namespace {

CublasLt open() {
  const std::string soname = LOCKSTEP_CUBLASLT_SONAME;
  void* lib = ::dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why = lib ? "" : ::dlerror();
#ifdef LOCKSTEP_CUBLASLT_BUILD_DIR
  if (lib == nullptr) {
    const std::string built = std::string(LOCKSTEP_CUBLASLT_BUILD_DIR) + "/" + soname;
    lib = ::dlopen(built.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) why += std::string("; ") + ::dlerror();
  }
#endif
  LOCKSTEP_ENFORCE(lib != nullptr, Error, "cannot open cuBLASLt (", soname,
                   ", which GEMMs on a GPU need): ", why,
                   "; install the CUDA toolkit's cuBLAS or put its lib directory on LD_LIBRARY_PATH");
  CublasLt lt;
#define LOCKSTEP_CUBLASLT_RESOLVE(name)                                                                   \
  lt.name = reinterpret_cast<decltype(lt.name)>(::dlsym(lib, #name));                                     \
  LOCKSTEP_ENFORCE(lt.name != nullptr, Error, soname, " has no ", #name, " (lockstep was built against ", \
                   "cuBLAS ", CUBLAS_VER_MAJOR, ".", CUBLAS_VER_MINOR, "); use that CUDA version's cuBLAS");
  LOCKSTEP_CUBLASLT_FUNCTIONS(LOCKSTEP_CUBLASLT_RESOLVE)
#undef LOCKSTEP_CUBLASLT_RESOLVE
  return lt;  // the library stays open for the life of the process
}

}  // namespace

const CublasLt& cublasLt() {
  static const CublasLt lt = open();  // a failed open throws and is retried by the next call
  return lt;
}

}  // namespace lockstep::kernels::cuda
