#pragma once
// How the GPU kernels may trade repeatability and precision for speed: process-wide switches with
// the meanings of PyTorch's torch.backends ones, read by the cuDNN and cuBLASLt kernels
// (kernels/cuda/conv.cpp, blas.cpp) each time they choose an algorithm. The CPU kernels read none
// of them: they have no TF32 and are always deterministic. Built with or without CUDA.
//
// lockstep's defaults differ from PyTorch's in one place on purpose: runs are deterministic unless
// told otherwise (as on the CPU, so a resumed GPU run is the uninterrupted one bitwise), where
// PyTorch's cudnn.deterministic is False.
namespace lockstep::kernels {

struct GpuMathOptions {
  /// torch.backends.cudnn.deterministic (PyTorch default False): cuDNN convolutions use only
  /// algorithms cuDNN reports as deterministic (no atomics), so a run repeats bitwise; a problem
  /// with none is a NotSupportedError. false allows the nondeterministic ones where faster.
  bool cudnn_deterministic = true;
  /// torch.backends.cudnn.benchmark (default False): each convolution problem times cuDNN's
  /// algorithms once (cudnnFind*AlgorithmEx) and keeps the fastest allowed one, instead of taking
  /// cuDNN's heuristic choice. Timings vary, so two runs may pick different (each deterministic)
  /// algorithms: not bitwise repeatable across runs.
  bool cudnn_benchmark = false;
  /// torch.backends.cudnn.allow_tf32 (default True): f32 convolutions may run on TF32 tensor cores
  /// (inputs rounded to a 10-bit mantissa, f32 accumulation; ~1e-3 relative). false: FMA kernels
  /// only (CUDNN_FMA_MATH), full f32. bf16/f16 always use tensor cores; f64 never.
  bool cudnn_allow_tf32 = true;
  /// torch.backends.cuda.matmul.allow_tf32 (default False): f32 GEMMs (linear, matmul) may compute
  /// in TF32 (CUBLAS_COMPUTE_32F_FAST_TF32). false: CUBLAS_COMPUTE_32F.
  bool matmul_allow_tf32 = false;
  /// torch.backends.cuda.enable_cudnn_sdp (default True): bf16/f16 attention may run on cuDNN's
  /// fused SDPA (kernels/cuda/fused_attention.h says where it applies). false: lockstep's own
  /// kernel for every attention.
  bool cudnn_sdp = true;

  bool operator==(const GpuMathOptions&) const = default;
};

/// The options in force. Thread-safe (one atomic read); cheap enough for every kernel call.
GpuMathOptions gpuMathOptions();
/// Sets them for the whole process (every thread, every device). Kernels read them when they choose
/// an algorithm for a problem, and the choice is kept per problem and options, so options changed
/// between steps apply from the next call on. Thread-safe. A CUDA graph already captured keeps the
/// algorithms it captured.
void setGpuMathOptions(const GpuMathOptions& options);

/// Sets options for its scope and restores the previous ones (tests).
class ScopedGpuMathOptions {
 public:
  explicit ScopedGpuMathOptions(const GpuMathOptions& options);
  ~ScopedGpuMathOptions();
  ScopedGpuMathOptions(const ScopedGpuMathOptions&) = delete;
  ScopedGpuMathOptions& operator=(const ScopedGpuMathOptions&) = delete;

 private:
  GpuMathOptions previous_;
};

}  // namespace lockstep::kernels
