// The CPU's f32 batch norm on ResNet shapes (channels_last, training): lockstep's own kernel, which
// adds the residual and applies the relu in its passes, beside oneDNN's batch norm followed by its
// binary add and eltwise relu (what ran before). Forward and backward times, one line per shape:
//   bench_batch_norm [--threads 1 --steps 20 --batch 8]
#include "lockstep/kernels/tables/batch_norm.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "lockstep/kernels/threads.h"
#include "lockstep/tensor/generator.h"

using namespace lockstep;

namespace {
double bestMs(int steps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

Tensor random(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s);
  Generator g(seed);
  g.uniform(t, -1, 1);
  return t.toFormat(MemoryFormat::channels_last);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU batch norm + residual + relu: lockstep's kernel vs oneDNN's primitives"};
  int steps = 20, threads = 1;
  int64_t batch = 8;
  app.add_option("--steps", steps, "timed repetitions (the best is printed)");
  app.add_option("--threads", threads, "intra-op threads");
  app.add_option("--batch", batch, "N of each shape");
  CLI11_PARSE(app, argc, argv);
  kernels::setNumThreads(threads);
  // ResNet-50 at 224x224 (its stages' widest activations), ResNet-18 CIFAR (32x32 and 4x4).
  const std::vector<Shape> shapes = {{batch, 64, 112, 112},   {batch, 256, 56, 56},  {batch, 64, 56, 56},
                                     {batch, 512, 28, 28},    {batch, 1024, 14, 14}, {batch, 2048, 7, 7},
                                     {batch * 4, 64, 32, 32}, {batch * 4, 512, 4, 4}};
  std::printf("%-22s %9s %9s %9s %9s %7s %7s\n", "shape [N,C,H,W]", "fwd_own", "fwd_dnnl", "bwd_own",
              "bwd_dnnl", "fwd_x", "bwd_x");
  for (const Shape& s : shapes) {
    const int64_t C = s[1];
    Tensor x = random(s, 1), res = random(s, 2), gy = random(s, 3);
    Tensor w = Tensor::ones({C}), b = Tensor::zeros({C});
    kernels::BatchNormParams p;
    p.relu = true;
    auto fwd = [&](const kernels::BatchNormKernels& k) {
      return bestMs(steps, [&] { k.batchNorm2dForward(x, w, b, Tensor(), Tensor(), res, p); });
    };
    auto bwd = [&](const kernels::BatchNormKernels& k) {
      auto r = k.batchNorm2dForward(x, w, b, Tensor(), Tensor(), res, p);
      return bestMs(steps, [&] { k.batchNorm2dBackward(gy, x, w, true, r.mean, r.var, r.y, true, p); });
    };
    const double fo = fwd(kernels::cpu::kBatchNorm), fd = fwd(kernels::onednn::kBatchNorm);
    const double bo = bwd(kernels::cpu::kBatchNorm), bd = bwd(kernels::onednn::kBatchNorm);
    std::printf("%-22s %9.3f %9.3f %9.3f %9.3f %6.2fx %6.2fx\n", shapeToString(s).c_str(), fo, fd, bo, bd,
                fd / fo, bd / bo);
  }
  return 0;
}
