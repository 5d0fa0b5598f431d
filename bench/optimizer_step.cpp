// Times one optimizer step (Adam, AdamW, SGD with momentum) over the seed MNIST CNN's parameters
// (93,322 floats), gradients held fixed. A DDP step of that model spends this time on every rank.
//   bench_optimizer_step [--steps 2000]
//   bench_optimizer_step --numel 33554432 --steps 10   (one flat parameter: ZeRO-Offload's host step,
//                                                      Adam and the passes around it, then fused;
//                                                      bench/offload_step.bench.sh)
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "lockstep/kernels/finite.h"
#include "lockstep/kernels/norm.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"Times one optimizer step over the seed MNIST CNN's parameters"};
  int steps = 2000;
  int64_t numel = 0;
  app.add_option("--steps", steps, "timed steps per optimizer");
  app.add_option("--numel", numel,
                 "instead: Adam over one flat f32 parameter of this many elements (ZeRO-Offload's host "
                 "step over a partition), with the memory traffic it makes per second, then the other "
                 "passes of that host step (overflow check, norm, clip, rounding to bf16)");
  CLI11_PARSE(app, argc, argv);
  if (numel > 0) {
    autograd::Variable p(Tensor::full({numel}, 0.5), true);
    Tensor g = Tensor::full({numel}, 1e-3);
    p.setGrad(g);
    optim::Adam adam({p}, optim::AdamOptions{});
    adam.step();
    auto time = [&](auto&& fn) {
      fn();  // first touch of any buffer it makes
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) fn();
      return 1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    };
    const double adam_ms = time([&] { adam.step(); });
    // Read: parameter, gradient, exp_avg, exp_avg_sq; written: parameter, exp_avg, exp_avg_sq.
    std::printf("optimizer=adam numel=%lld step_ms=%.2f threads=%d traffic_gb_per_s=%.1f\n",
                static_cast<long long>(numel), adam_ms, kernels::numThreads(), 28.0 * numel / adam_ms / 1e6);
    // The rest of ZeRO-Offload's host step with bf16 and gradient_clipping (parallel/zero/optimizer.cpp):
    // the check for inf / nan (bf16's check_grad_overflow), the norm, the clip's multiplication (a
    // coefficient below 1, so it runs), then, after the update, the f32 master weights rounded to bf16
    // for the copy to the GPU.
    Tensor up = Tensor::empty({numel}, DType::bf16);
    const double check_ms = time([&] { kernels::hasNonFinite(g); });
    const double norm_ms = time([&] { optim::tensorNorm(g); });
    const double clip_ms =
        time([&] { kernels::scaleByClipCoefficient({g}, Tensor::scalar(2.0, DType::f64), 1.0); });
    const double round_ms = time([&] { up.copyFrom(p.tensor()); });
    std::printf(
        "offload_host_step numel=%lld threads=%d check_ms=%.2f norm_ms=%.2f clip_ms=%.2f adam_ms=%.2f "
        "round_bf16_ms=%.2f total_ms=%.2f\n",
        static_cast<long long>(numel), kernels::numThreads(), check_ms, norm_ms, clip_ms, adam_ms, round_ms,
        check_ms + norm_ms + clip_ms + adam_ms + round_ms);
    // The same host step fused (ZeroOptions::fused_host_step): the norm is also the check, and the
    // clip's coefficient and the rounding to bf16 go into the update's pass (bitwise the same).
    optim::Optimizer::FusedStepExtras extras;
    extras.grad_scale = 0.5;
    extras.copies.emplace(p.tensor().dataPtr(), up);
    const double fused_ms = time([&] { adam.stepFused(extras); });
    std::printf(
        "fused_host_step numel=%lld threads=%d norm_ms=%.2f adam_clip_round_ms=%.2f total_ms=%.2f "
        "speedup=%.2fx\n",
        static_cast<long long>(numel), kernels::numThreads(), norm_ms, fused_ms, norm_ms + fused_ms,
        (check_ms + norm_ms + clip_ms + adam_ms + round_ms) / (norm_ms + fused_ms));
    return 0;
  }
  Generator gen(0);
  nn::ModelOptions mo;
  mo.generator = &gen;
  auto model = nn::makeModel("mnist_cnn", mo);
  for (auto& p : model->parameters()) p.setGrad(Tensor::full(p.shape(), 1e-3));
  auto time = [&](const char* name, optim::Optimizer& opt) {
    for (int i = 0; i < 50; ++i) opt.step();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) opt.step();
    double us = 1e6 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    std::printf("optimizer=%s params=93322 step_us=%.1f\n", name, us);
  };
  optim::AdamOptions ao;
  optim::Adam adam(model->parameters(), ao);
  time("adam", adam);
  optim::AdamW adamw(model->parameters(), optim::AdamWOptions{});
  time("adamw", adamw);
  optim::SGDOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  optim::SGD sgd(model->parameters(), so);
  time("sgd_momentum", sgd);
  return 0;
}
