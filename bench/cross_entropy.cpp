// Cross entropy over a large vocabulary (GPT-2's 50257 words, 2048 rows): time and the allocator's
// peak bytes beyond the logits during forward + backward. The fused kernel keeps only an [N]
// logsumexp between the passes, so the peak beyond the input is the gradient itself (one [N, V]).
//   bench_cross_entropy [--rows 2048 --vocab 50257 --threads 1 --steps 3]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "lockstep/autograd.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/tensor/allocator.h"

using namespace lockstep;
using namespace lockstep::autograd;

int main(int argc, char** argv) {
  CLI::App app{"Cross entropy over a large vocabulary: time and peak memory of forward + backward"};
  int64_t rows = 2048, vocab = 50257;
  int steps = 3, threads = 1;
  app.add_option("--rows", rows, "rows N (tokens)");
  app.add_option("--vocab", vocab, "classes V");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--threads", threads, "intra-op threads");
  CLI11_PARSE(app, argc, argv);
  kernels::setNumThreads(threads);
  Generator gen(0);
  // Filled from one random row: Generator::uniform on the whole tensor would pass through an f64
  // temporary and leave the allocator's (never reset) peak above anything the step does.
  Tensor row = Tensor::empty({vocab});
  gen.uniform(row, -3, 3);
  Tensor logits = Tensor::empty({rows, vocab});
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < vocab; ++j)
      logits.data<float>()[i * vocab + j] = row.data<float>()[(j + 7 * i) % vocab];
  }
  Tensor target = Tensor::empty({rows}, DType::i64);
  for (int64_t i = 0; i < rows; ++i) target.data<int64_t>()[i] = static_cast<int64_t>(gen.nextBelow(vocab));
  auto step = [&] {
    Variable x(logits, true);
    Variable loss = crossEntropy(x, target, {Reduction::mean, 0.1, -100});
    loss.backward();
    return x.grad().numel();
  };
  const size_t before = CachingAllocator::instance().stats().bytes_in_use;  // includes the logits
  step();
  const size_t peak = CachingAllocator::instance().stats().peak_bytes_in_use - before;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double ms =
      1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  std::printf(
      "cross_entropy N=%lld V=%lld threads=%d fwd_bwd_ms=%.1f logits_bytes=%zu peak_beyond_logits=%zu\n",
      static_cast<long long>(rows), static_cast<long long>(vocab), threads, ms, logits.nbytes(), peak);
  return 0;
}
