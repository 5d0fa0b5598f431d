// Times one optimizer step (Adam, AdamW, SGD with momentum) over the seed MNIST CNN's parameters
// (93,322 floats), gradients held fixed. A DDP step of that model spends this time on every rank.
//   bench_optimizer_step [--steps 2000]
//   bench_optimizer_step --numel 33554432 --steps 10   (one flat parameter: ZeRO-Offload's host step)
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

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
                 "step over a partition), with the memory traffic it makes per second");
  CLI11_PARSE(app, argc, argv);
  if (numel > 0) {
    autograd::Variable p(Tensor::full({numel}, 0.5), true);
    p.setGrad(Tensor::full({numel}, 1e-3));
    optim::Adam adam({p}, optim::AdamOptions{});
    adam.step();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) adam.step();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
    // Read: parameter, gradient, exp_avg, exp_avg_sq; written: parameter, exp_avg, exp_avg_sq.
    std::printf("optimizer=adam numel=%lld step_ms=%.2f threads=%d traffic_gb_per_s=%.1f\n",
                static_cast<long long>(numel), 1e3 * s, kernels::numThreads(), 28.0 * numel / s / 1e9);
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
