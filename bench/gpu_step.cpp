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
#include <algorithm>
#include <cstdio>
#include <optional>

#include "bench/gpu_bench.h"
#include "lockstep/autograd.h"
#include "lockstep/kernels/gpu_math_options.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"

using namespace lockstep;

namespace {

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
  const double sec = bench::timeSteps(step, c.warmup, c.steps);
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
      [&engine](const Tensor& input, const Tensor& target) {
        return engine.forwardLoss(autograd::Variable(input), [&](const autograd::Variable& out) {
          return autograd::crossEntropy(out, target);
        });
      },
      bench::kGraphEagerSteps);
  const auto [sec, loss] = bench::timeGraphSteps(graph, s.x, s.y, c.warmup, c.steps);
  return {sec, loss};
}

/// Runs one case and prints its line; false (after a `failed:` line) when it threw.
bool measure(const Case& c, const std::string& mode, const kernels::GpuMathOptions& options) {
  const std::string head = "impl=lockstep-" + mode + implSuffix(options) + " model=" + c.model +
                           " batch=" + std::to_string(c.batch) + " dtype=" + c.dtype + " " +
                           optionKeys(options);
  return bench::measure(head, [&] {
    const Result r = mode == "graph" ? runGraph(c) : runEager(c);
    return bench::formatted("step_us=%.1f samples_per_s=%.0f loss=%.4f", 1e6 * r.seconds / c.steps,
                            static_cast<double>(c.batch) * c.steps / r.seconds, r.loss);
  });
}

/// The first line: GPU, driver, cuDNN (the library loaded, and the headers built against) and CUDA.
void printVersions() {
#if LOCKSTEP_WITH_CUDA
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  bench::printVersions(prop, "");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times training steps of the seed CNN, ResNet-18 (CIFAR) and ResNet-50 (ImageNet) on a GPU"};
  std::string models = "seed_cnn,resnet18_cifar,resnet50", modes = "eager,graph", dtypes = "f32,bf16";
  int steps = 500, warmup = 50;
  bool cudnn_benchmark = false, cudnn_nondeterministic = false;
  bench::addCaseOptions(app, models, "comma-separated: seed_cnn, resnet18_cifar, resnet50", modes, dtypes);
  app.add_option("--steps", steps, "timed steps per seed CNN case (ResNets: fewer)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first (seed CNN; ResNets: 20 and 10)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--cudnn-benchmark", cudnn_benchmark,
               "time cuDNN's algorithms once per convolution and keep the fastest (default: its heuristic)");
  app.add_flag("--cudnn-nondeterministic", cudnn_nondeterministic,
               "allow nondeterministic cuDNN algorithms (default: deterministic only)");
  app.add_flag("--profile-step", bench::g_profile_step,
               "run one step after each case's warmup inside cudaProfilerStart/Stop (for ncu "
               "--profile-from-start off: bench/gpu_kernels.sh)");
  CLI11_PARSE(app, argc, argv);
  try {
    bench::checkCaseNames(models, {"seed_cnn", "resnet18_cifar", "resnet50"}, modes, dtypes);
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
    for (const std::string& m : bench::split(models)) {
      for (const std::string& d : bench::split(dtypes)) {
        for (const Case& c : casesOf(m, d, steps, warmup)) {
          for (const std::string& mode : bench::split(modes)) all_ok = measure(c, mode, options) && all_ok;
        }
      }
    }
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_step: %s\n", e.what());
    return 1;
  }
}
