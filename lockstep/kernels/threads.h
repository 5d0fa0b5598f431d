#pragma once

namespace lockstep::kernels {

/// Sets the intra-op thread count from LOCKSTEP_NUM_THREADS, else OMP_NUM_THREADS, else all cores
/// (`lockstep train` may set another for a rank on a GPU afterwards: train/run_setup.h).
/// Called once, on first kernel use; safe to call again.
void initThreads();
/// Intra-op threads used by kernels (oneDNN and lockstep's own loops).
int numThreads();
void setNumThreads(int n);

}  // namespace lockstep::kernels
