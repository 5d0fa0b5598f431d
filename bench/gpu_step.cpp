// Training steps per second on one GPU, with SGD and cross entropy on fixed random data: the seed
// CNN (seed 001's Net, lockstep's mnist_cnn) at batch 32 and 128, the CIFAR ResNet-18 at batch 256
// and ResNet-50 at ImageNet's shape (224x224, 1000 classes) at batch 128, both channels-last, each
// in f32 and bf16 autocast. The same steps as bench/scripts/torch_gpu_step.py, which
// bench/gpu.bench.sh runs beside it on the same GPU. Each step runs two ways:
//   eager  forward, loss, backward and the optimizer step launched op by op (optim::SGD)
//   graph  the trainer's `cuda_graph` path: an Engine (one process, no DDP) stepped through a
//          parallel::StepGraph, the whole step captured once as a CUDA graph and replayed
// --cudnn-benchmark and --cudnn-nondeterministic set kernels::GpuMathOptions for the whole run
// (torch.backends.cudnn.benchmark, not .deterministic); lockstep's default is cuDNN's heuristic
// choice among deterministic algorithms. The first line names the GPU, the driver, cuDNN and the
// CUDA runtime; then one line per case: samples/s, the last loss, the case's peak of GPU memory in
// tensors (`failed:` and the reason when a case throws; the others still run, and the exit status
// is 1).
//   bench_gpu_step [--models seed_cnn,resnet18_cifar,resnet50] [--modes eager,graph]
//                  [--dtypes f32,bf16] [--steps 500] [--warmup 50]
//                  [--cudnn-benchmark] [--cudnn-nondeterministic]
// ResNet cases time fewer steps (ResNet-18: max(steps/5, 20) after 20 warmup; ResNet-50:
// max(steps/10, 20) after 10), as the PyTorch side does.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>

#include "lockstep/autograd.h"
#include "lockstep/kernels/gpu_math_options.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"

#if LOCKSTEP_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "lockstep/tensor/cuda/allocator.h"
#include "lockstep/tensor/cuda/runtime.h"
#endif

using namespace lockstep;

namespace {

// Eager steps StepGraph runs before it captures (cuDNN's and cuBLASLt's choices, the optimizer's
// state and the allocator's pools settle first); a case's warmup covers them and the capture.
constexpr int kGraphEagerSteps = 3;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) out.push_back(part);
  return out;
}

void checkNames(const std::string& flag, const std::vector<std::string>& given,
                const std::vector<std::string>& known) {
  for (const std::string& g : given) {
    if (std::find(known.begin(), known.end(), g) == known.end()) {
      std::string names;
      for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
      throw ValueError(flag + ": unknown '" + g + "' (known: " + names + ")");
    }
  }
}

/// What a benchmark model is in lockstep's zoo and what it is fed.
struct ModelShape {
  std::string zoo_name;
  Shape item;  // one sample, NCHW order
  int64_t classes;
  bool channels_last;  // the input's layout (the seed CNN converts its own)
};

ModelShape modelShape(const std::string& name) {
  if (name == "seed_cnn") return {"mnist_cnn", {1, 28, 28}, 10, false};
  if (name == "resnet18_cifar") return {"resnet18_cifar", {3, 32, 32}, 10, true};
  return {"resnet50", {3, 224, 224}, 1000, true};
}

struct Case {
  std::string model;
  int64_t batch;
  std::string dtype;
  int steps, warmup;
};

std::vector<Case> casesOf(const std::string& model, const std::string& dtype, int steps, int warmup) {
  if (model == "resnet18_cifar") return {{model, 256, dtype, std::max(steps / 5, 20), 20}};
  if (model == "resnet50") return {{model, 128, dtype, std::max(steps / 10, 20), 10}};
  return {{model, 32, dtype, steps, warmup}, {model, 128, dtype, steps, warmup}};
}

/// The cuDNN options as the keys of every output line, and the impl's suffix: "" for lockstep's
/// default, "-optin" for benchmark with nondeterministic algorithms (PyTorch's usual setting).
std::string optionKeys(const kernels::GpuMathOptions& o) {
  return std::string("cudnn=") + (o.cudnn_benchmark ? "benchmark" : "heuristic") +
         " deterministic=" + (o.cudnn_deterministic ? "1" : "0");
}

std::string implSuffix(const kernels::GpuMathOptions& o) {
  if (o.cudnn_benchmark && !o.cudnn_deterministic) return "-optin";
  if (o.cudnn_benchmark) return "-benchmark";
  if (!o.cudnn_deterministic) return "-nondeterministic";
  return "";
}

/// The case's model on the GPU, its input (fixed random values) and labels.
struct Setup {
  std::shared_ptr<nn::Module> model;
  Tensor x, y;
};

Setup setup(const Case& c) {
  const Device dev = Device::cuda(0);
  const ModelShape shape = modelShape(c.model);
  Generator gen(0);
  nn::ModelOptions mo;
  mo.generator = &gen;
  mo.num_classes = shape.classes;
  Setup s;
  s.model = nn::makeModel(shape.zoo_name, mo);
  s.model->to(dev);
  s.model->train();
  Shape xs = {c.batch};
  xs.insert(xs.end(), shape.item.begin(), shape.item.end());
  s.x = Tensor::empty(xs);
  gen.uniform(s.x, 0.0, 1.0);
  s.x = s.x.to(dev);
  if (shape.channels_last) s.x = s.x.toFormat(MemoryFormat::channels_last);
  std::vector<int64_t> labels(static_cast<size_t>(c.batch));
  for (int64_t i = 0; i < c.batch; ++i) labels[static_cast<size_t>(i)] = i % shape.classes;
  s.y = Tensor::fromVector(labels, {c.batch}).to(dev);
  return s;
}

void synchronize() {
#if LOCKSTEP_WITH_CUDA
  cuda::currentStream(0).synchronize();
#endif
}

/// The GPU memory the case's tensors took at most (MiB); the count starts with the case.
double peakMiB() {
#if LOCKSTEP_WITH_CUDA
  return static_cast<double>(cuda::CudaCachingAllocator::forDevice(0).stats().allocated_peak) / (1 << 20);
#else
  return 0;
#endif
}

/// Between cases: the cache emptied, as a fresh process would start (ResNet-50 after ResNet-18),
/// and the peak reset.
void resetMemory() {
#if LOCKSTEP_WITH_CUDA
  cuda::CudaCachingAllocator& a = cuda::CudaCachingAllocator::forDevice(0);
  a.emptyCache();
  a.resetPeakStats();
#endif
}

// --profile-step: one step after the warmup runs between cudaProfilerStart and Stop, for a profiler
// started with profiling off (bench/gpu_kernels.sh: `ncu --profile-from-start off`).
bool g_profile_step = false;

/// Seconds for `steps` calls of step after `warmup` untimed ones.
double timeSteps(const std::function<void()>& step, int warmup, int steps) {
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

struct Result {
  double seconds, loss;
};

Result runEager(const Case& c) {
  Setup s = setup(c);
  optim::SGD opt(s.model->parameters(), {.lr = 0.01});
  autograd::Variable loss;
  auto step = [&] {
    std::optional<autograd::AutocastGuard> ac;
    if (c.dtype == "bf16") ac.emplace(DType::bf16);
    loss = autograd::crossEntropy(autograd::toDType((*s.model)(autograd::Variable(s.x)), DType::f32), s.y);
    ac.reset();
    opt.zeroGrad();
    loss.backward();
    opt.step();
  };
  const double sec = timeSteps(step, c.warmup, c.steps);
  return {sec, loss.item()};
}

Result runGraph(const Case& c) {
  Setup s = setup(c);
  parallel::EngineOptions eo;
  eo.optimizer = {"SGD", {{"lr", 0.01}}};
  // bf16: the engine runs forward under autocast and returns its output in f32, as the eager step.
  eo.precision = c.dtype == "bf16" ? parallel::Precision::bf16 : parallel::Precision::fp32;
  parallel::Engine engine(s.model, eo, parallel::DistributedEnvironment{});
  parallel::StepGraph graph(
      engine,
      [](const autograd::Variable& out, const Tensor& target) { return autograd::crossEntropy(out, target); },
      kGraphEagerSteps);
  Tensor loss;
  const double sec =
      timeSteps([&] { loss = graph.step(s.x, s.y); }, std::max(c.warmup, kGraphEagerSteps + 1), c.steps);
  if (!graph.captured()) throw Error("the step was not captured during the warmup");
  return {sec, loss.itemDouble()};
}

/// Runs one case and prints its line; false (after a `failed:` line) when it threw.
bool measure(const Case& c, const std::string& mode, const kernels::GpuMathOptions& options) {
  const std::string head = "impl=lockstep-" + mode + implSuffix(options) + " model=" + c.model +
                           " batch=" + std::to_string(c.batch) + " dtype=" + c.dtype + " " +
                           optionKeys(options);
  bool ok = true;
  resetMemory();
  try {
    const Result r = mode == "graph" ? runGraph(c) : runEager(c);
    std::printf("%s step_us=%.1f samples_per_s=%.0f loss=%.4f peak_mib=%.0f\n", head.c_str(),
                1e6 * r.seconds / c.steps, static_cast<double>(c.batch) * c.steps / r.seconds, r.loss,
                peakMiB());
  } catch (const std::exception& e) {
    std::string why = e.what();
    std::replace(why.begin(), why.end(), '\n', ' ');  // one line per case
    std::printf("%s failed: %s\n", head.c_str(), why.c_str());
    ok = false;
  }
  std::fflush(stdout);
  return ok;
}

/// The driver's version as nvidia-smi shows it (the kernel module's), or "unknown".
std::string driverVersion() {
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

/// The first line: GPU, driver, cuDNN (the library loaded, and the headers built against) and CUDA.
void printVersions() {
#if LOCKSTEP_WITH_CUDA
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int driver_cuda = 0, runtime = 0;
  cudaDriverGetVersion(&driver_cuda);
  cudaRuntimeGetVersion(&runtime);
  std::printf("gpu=\"%s\" sm=%d%d driver=%s driver_cuda=%d.%d cuda_runtime=%d.%d cudnn=%zu cudnn_built=%d\n",
              prop.name, prop.major, prop.minor, driverVersion().c_str(), driver_cuda / 1000,
              (driver_cuda % 1000) / 10, runtime / 1000, (runtime % 1000) / 10, cudnnGetVersion(),
              CUDNN_VERSION);
  std::fflush(stdout);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times training steps of the seed CNN, ResNet-18 (CIFAR) and ResNet-50 (ImageNet) on a GPU"};
  std::string models = "seed_cnn,resnet18_cifar,resnet50", modes = "eager,graph", dtypes = "f32,bf16";
  int steps = 500, warmup = 50;
  bool cudnn_benchmark = false, cudnn_nondeterministic = false;
  app.add_option("--models", models, "comma-separated: seed_cnn, resnet18_cifar, resnet50");
  app.add_option("--modes", modes,
                 "comma-separated: eager (op by op), graph (StepGraph: one CUDA graph a step)");
  app.add_option("--dtypes", dtypes, "comma-separated: f32, bf16");
  app.add_option("--steps", steps, "timed steps per seed CNN case (ResNets: fewer)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first (seed CNN; ResNets: 20 and 10)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--cudnn-benchmark", cudnn_benchmark,
               "time cuDNN's algorithms once per convolution and keep the fastest (default: its heuristic)");
  app.add_flag("--cudnn-nondeterministic", cudnn_nondeterministic,
               "allow nondeterministic cuDNN algorithms (default: deterministic only)");
  app.add_flag("--profile-step", g_profile_step,
               "run one step after each case's warmup inside cudaProfilerStart/Stop (for ncu "
               "--profile-from-start off: bench/gpu_kernels.sh)");
  CLI11_PARSE(app, argc, argv);
  try {
    checkNames("--models", split(models), {"seed_cnn", "resnet18_cifar", "resnet50"});
    checkNames("--modes", split(modes), {"eager", "graph"});
    checkNames("--dtypes", split(dtypes), {"f32", "bf16"});
    checkDeviceAvailable(Device::cuda(0));
#if LOCKSTEP_WITH_CUDA
    cuda::DeviceGuard guard(0);
#endif
    kernels::GpuMathOptions options = kernels::gpuMathOptions();
    options.cudnn_benchmark = cudnn_benchmark;
    options.cudnn_deterministic = !cudnn_nondeterministic;
    kernels::setGpuMathOptions(options);
    printVersions();
    bool all_ok = true;
    for (const std::string& m : split(models)) {
      for (const std::string& d : split(dtypes)) {
        for (const Case& c : casesOf(m, d, steps, warmup)) {
          for (const std::string& mode : split(modes)) all_ok = measure(c, mode, options) && all_ok;
        }
      }
    }
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_step: %s\n", e.what());
    return 1;
  }
}
