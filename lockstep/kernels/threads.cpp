#include "lockstep/kernels/threads.h"

#include <omp.h>

#include <mutex>

#include "lockstep/util/env.h"
#include "lockstep/util/error.h"

namespace lockstep::kernels {

void initThreads() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto n = env::getInt("LOCKSTEP_NUM_THREADS");
    if (!n) n = env::getInt("OMP_NUM_THREADS");
    if (n) {
      LOCKSTEP_ENFORCE(*n >= 1, ValueError, "thread count must be >= 1, got ", *n,
                       " (from LOCKSTEP_NUM_THREADS or OMP_NUM_THREADS)");
      omp_set_num_threads(static_cast<int>(*n));
    }
  });
}

int numThreads() {
  initThreads();
  return omp_get_max_threads();
}

void setNumThreads(int n) {
  LOCKSTEP_ENFORCE(n >= 1, ValueError, "setNumThreads: thread count must be >= 1, got ", n);
  initThreads();
  omp_set_num_threads(n);
}

}  // namespace lockstep::kernels
