// Training steps per second on one GPU: the seed CNN (seed 001's Net, lockstep's mnist_cnn) at
// batch 32 and 128 and the CIFAR ResNet-18 (channels-last) at batch 256, f32 and bf16 autocast,
// with SGD and cross entropy on fixed random data: the same step as bench/scripts/torch_gpu_step.py,
// which bench/gpu.bench.sh runs beside it on the same GPU. Prints one line per case.
//   bench_gpu_step [--models seed_cnn,resnet18_cifar] [--steps 500] [--warmup 50] [--dtypes f32,bf16]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"

#if LOCKSTEP_WITH_CUDA
#include "lockstep/tensor/cuda/runtime.h"
#endif

using namespace lockstep;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) out.push_back(part);
  return out;
}

void measure(const std::string& model_name, int64_t batch, const std::string& dtype, int steps, int warmup) {
  const Device dev = Device::cuda(0);
  Generator gen(0);
  nn::ModelOptions mo;
  mo.generator = &gen;
  auto model = nn::makeModel(model_name == "seed_cnn" ? "mnist_cnn" : model_name, mo);
  model->to(dev);
  const bool resnet = model_name == "resnet18_cifar";
  Tensor x = Tensor::empty(resnet ? Shape{batch, 3, 32, 32} : Shape{batch, 1, 28, 28});
  gen.uniform(x, 0.0, 1.0);
  x = x.to(dev);
  if (resnet) x = x.toFormat(MemoryFormat::channels_last);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = i % 10;
  Tensor y = Tensor::fromVector(labels, {batch}).to(dev);
  optim::SGD opt(model->parameters(), {.lr = 0.01});
  autograd::Variable loss;
  auto step = [&] {
    std::optional<autograd::AutocastGuard> ac;
    if (dtype == "bf16") ac.emplace(DType::bf16);
    loss = autograd::crossEntropy(autograd::toDType((*model)(autograd::Variable(x)), DType::f32), y);
    ac.reset();
    opt.zeroGrad();
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < warmup; ++i) step();
#if LOCKSTEP_WITH_CUDA
  cuda::currentStream(0).synchronize();
#endif
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
#if LOCKSTEP_WITH_CUDA
  cuda::currentStream(0).synchronize();
#endif
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("impl=lockstep-eager model=%s batch=%lld dtype=%s step_us=%.1f samples_per_s=%.0f loss=%.4f\n",
              model_name.c_str(), static_cast<long long>(batch), dtype.c_str(), 1e6 * sec / steps,
              static_cast<double>(batch) * steps / sec, loss.item());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times training steps of the seed CNN and ResNet-18 on a GPU"};
  std::string models = "seed_cnn,resnet18_cifar", dtypes = "f32,bf16";
  int steps = 500, warmup = 50;
  app.add_option("--models", models, "comma-separated: seed_cnn, resnet18_cifar");
  app.add_option("--dtypes", dtypes, "comma-separated: f32, bf16");
  app.add_option("--steps", steps, "timed steps per case")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    checkDeviceAvailable(Device::cuda(0));
#if LOCKSTEP_WITH_CUDA
    std::printf("gpu=%s\n", cuda::describeDevice(0).c_str());
#endif
    for (const std::string& m : split(models)) {
      for (const std::string& d : split(dtypes)) {
        if (m == "resnet18_cifar") {
          measure(m, 256, d, std::max(steps / 5, 50), 20);
        } else {
          for (int64_t b : {32, 128}) measure(m, b, d, steps, warmup);
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
