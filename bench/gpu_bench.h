#pragma once
// What the one-GPU training benchmarks (bench/gpu_step.cpp, bench/gpu_lm.cpp) share: the flag
// lists, timing steps (and the graph mode's capture), the GPU memory counts, one output line per
// case (`failed:` and the reason when it throws) and the first line naming the versions. Header-only:
// every bench/*.cpp is a program of its own.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/parallel.h"

#if LOCKSTEP_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "lockstep/tensor/cuda/allocator.h"
#include "lockstep/tensor/cuda/runtime.h"
#endif

namespace lockstep::bench {

// Eager steps StepGraph runs before it captures (cuDNN's and cuBLASLt's choices, the optimizer's
// state and the allocator's pools settle first); a case's warmup covers them and the capture.
constexpr int kGraphEagerSteps = 3;

inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) out.push_back(part);
  return out;
}

/// Throws ValueError naming `flag` and the known names when `given` has another.
inline void checkNames(const std::string& flag, const std::vector<std::string>& given,
                       const std::vector<std::string>& known) {
  for (const std::string& g : given) {
    if (std::find(known.begin(), known.end(), g) == known.end()) {
      std::string names;
      for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
      throw ValueError(flag + ": unknown '" + g + "' (known: " + names + ")");
    }
  }
}

/// Checks the lists of --models (against `known_models`), --modes and --dtypes.
inline void checkCaseNames(const std::string& models, const std::vector<std::string>& known_models,
                           const std::string& modes, const std::string& dtypes) {
  checkNames("--models", split(models), known_models);
  checkNames("--modes", split(modes), {"eager", "graph"});
  checkNames("--dtypes", split(dtypes), {"f32", "bf16"});
}

/// printf's formatting into a string (the output lines' keys).
[[gnu::format(printf, 1, 2)]] inline std::string formatted(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), format, again);
  va_end(again);
  out.pop_back();
  return out;
}

inline void synchronize() {
#if LOCKSTEP_WITH_CUDA
  cuda::currentStream(0).synchronize();
#endif
}

/// The GPU memory the case's tensors took at most (MiB); the count starts with the case.
inline double peakMiB() {
#if LOCKSTEP_WITH_CUDA
  return static_cast<double>(cuda::CudaCachingAllocator::forDevice(0).stats().allocated_peak) / (1 << 20);
#else
  return 0;
#endif
}

/// Between cases: the cache emptied, as a fresh process would start (a big model after a small
/// one), and the peak reset.
inline void resetMemory() {
#if LOCKSTEP_WITH_CUDA
  cuda::CudaCachingAllocator& a = cuda::CudaCachingAllocator::forDevice(0);
  a.emptyCache();
  a.resetPeakStats();
#endif
}

// --profile-step: one step after the warmup runs between cudaProfilerStart and Stop, for a profiler
// started with profiling off (ncu --profile-from-start off: bench/gpu_kernels.sh).
inline bool g_profile_step = false;

/// Seconds for `steps` calls of step after `warmup` untimed ones.
inline double timeSteps(const std::function<void()>& step, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) step();
  synchronize();
#if LOCKSTEP_WITH_CUDA
  if (g_profile_step) {
    cudaProfilerStart();
    step();
    synchronize();
    cudaProfilerStop();
  }
#endif
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Seconds for `steps` replays of graph's step on (x, y) after `warmup` untimed steps (at least the
/// eager ones and the capture), and the last loss.
inline std::pair<double, double> timeGraphSteps(parallel::StepGraph& graph, const Tensor& x, const Tensor& y,
                                                int warmup, int steps) {
  Tensor loss;
  const double sec =
      timeSteps([&] { loss = graph.step(x, y); }, std::max(warmup, kGraphEagerSteps + 1), steps);
  if (!graph.captured()) throw Error("the step was not captured during the warmup");
  return {sec, loss.itemDouble()};
}

/// Runs one case from fresh memory counts and prints its line: `head`, the keys `run` returns, the
/// case's peak of GPU memory. False (after `head failed: why`) when it threw.
inline bool measure(const std::string& head, const std::function<std::string()>& run) {
  bool ok = true;
  resetMemory();
  try {
    const std::string keys = run();
    std::printf("%s %s peak_mib=%.0f\n", head.c_str(), keys.c_str(), peakMiB());
  } catch (const std::exception& e) {
    std::string why = e.what();
    std::replace(why.begin(), why.end(), '\n', ' ');  // one line per case
    std::printf("%s failed: %s\n", head.c_str(), why.c_str());
    ok = false;
  }
  std::fflush(stdout);
  return ok;
}

#if LOCKSTEP_WITH_CUDA
/// The driver's version as nvidia-smi shows it (the kernel module's), or "unknown".
inline std::string driverVersion() {
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..." or "... Open Kernel Module for
  // x86_64  580.95.05  ...": the first word of digits and dots.
  std::ifstream f("/proc/driver/nvidia/version");
  for (std::string word; f >> word;) {
    if (word.find('.') != std::string::npos && std::isdigit(static_cast<unsigned char>(word[0])) &&
        word.find_first_not_of("0123456789.") == std::string::npos)
      return word;
  }
  return "unknown";
}

/// The first line: GPU, driver, cuDNN (the library loaded, and the headers built against), CUDA,
/// then `more_keys` (" key=value ...").
inline void printVersions(const cudaDeviceProp& prop, const std::string& more_keys) {
  int driver_cuda = 0, runtime = 0;
  cudaDriverGetVersion(&driver_cuda);
  cudaRuntimeGetVersion(&runtime);
  std::printf(
      "gpu=\"%s\" sm=%d%d driver=%s driver_cuda=%d.%d cuda_runtime=%d.%d cudnn=%zu cudnn_built=%d%s\n",
      prop.name, prop.major, prop.minor, driverVersion().c_str(), driver_cuda / 1000,
      (driver_cuda % 1000) / 10, runtime / 1000, (runtime % 1000) / 10, cudnnGetVersion(), CUDNN_VERSION,
      more_keys.c_str());
  std::fflush(stdout);
}
#endif

/// The --models, --modes and --dtypes options (comma-separated lists), with --modes' eager and
/// graph and --dtypes' f32 and bf16 described.
inline void addCaseOptions(CLI::App& app, std::string& models, const std::string& models_help,
                           std::string& modes, std::string& dtypes) {
  app.add_option("--models", models, models_help);
  app.add_option("--modes", modes,
                 "comma-separated: eager (op by op), graph (StepGraph: one CUDA graph a step)");
  app.add_option("--dtypes", dtypes, "comma-separated: f32, bf16");
}

}  // namespace lockstep::bench
