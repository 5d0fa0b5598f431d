// Fused attention (autograd::scaledDotProductAttention) against the plain composition
// matmul -> softmax -> matmul, forward + backward, one head: time per step and the allocator's
// peak bytes in use (tensor/allocator.h) during the step. Run one configuration per process, so
// that each peak starts from an empty allocator (bench/attention.bench.sh runs the sweep).
//   bench_attention --impl fused|naive --seq 512 [--dim 64 --batch 1 --heads 1 --causal --dropout 0.1
//                   --threads 1]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "lockstep/autograd.h"
#include "lockstep/kernels/threads.h"
#include "lockstep/tensor/allocator.h"

using namespace lockstep;
using namespace lockstep::autograd;

int main(int argc, char** argv) {
  CLI::App app{"Fused vs naive attention: time and peak memory of forward + backward"};
  std::string impl = "fused";
  int64_t seq = 512, dim = 64, batch = 1, heads = 1;
  int steps = 10, threads = 1;
  bool causal = false;
  double dropout = 0.0;
  app.add_option("--impl", impl, "fused or naive")->check(CLI::IsMember({"fused", "naive"}));
  app.add_option("--seq", seq, "sequence length T");
  app.add_option("--dim", dim, "head dim D");
  app.add_option("--batch", batch, "batch B");
  app.add_option("--heads", heads, "heads H");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--threads", threads, "intra-op threads");
  app.add_flag("--causal", causal, "causal mask");
  app.add_option("--dropout", dropout, "dropout on the attention weights (naive: dropout after softmax)");
  CLI11_PARSE(app, argc, argv);
  kernels::setNumThreads(threads);
  Generator gen(0);
  Tensor tq = Tensor::empty({batch, heads, seq, dim}), tk = Tensor::empty({batch, heads, seq, dim});
  Tensor tv = Tensor::empty({batch, heads, seq, dim}), tg = Tensor::empty({batch, heads, seq, dim});
  gen.uniform(tq, -1, 1);
  gen.uniform(tk, -1, 1);
  gen.uniform(tv, -1, 1);
  gen.uniform(tg, -1, 1);
  Tensor mask;
  if (causal && impl == "naive") {
    mask = Tensor::zeros({seq, seq});
    float* m = mask.data<float>();
    for (int64_t i = 0; i < seq; ++i) {
      for (int64_t j = i + 1; j < seq; ++j) m[i * seq + j] = -INFINITY;
    }
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  auto step = [&] {
    Variable q(tq, true), k(tk, true), v(tv, true);
    Variable y;
    if (impl == "fused") {
      y = scaledDotProductAttention(q, k, v, {causal, dropout}, gen);
    } else {
      Variable s = matmul(q, transpose(k, 2, 3)) * scale;
      if (mask.defined()) s = s + Variable(mask, false);
      Variable w = softmax(s, -1);
      if (dropout > 0) w = autograd::dropout(w, dropout, true, gen);
      y = matmul(w, v);
    }
    y.backward(tg);
    return q.grad().numel() + k.grad().numel() + v.grad().numel();
  };
  const size_t before = CachingAllocator::instance().stats().bytes_in_use;
  step();  // warm-up; also sets the peak
  const size_t peak = CachingAllocator::instance().stats().peak_bytes_in_use - before;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double ms =
      1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  std::printf(
      "impl=%s B=%lld H=%lld T=%lld D=%lld causal=%d dropout=%g threads=%d fwd_bwd_ms=%.3f peak_bytes=%zu\n",
      impl.c_str(), static_cast<long long>(batch), static_cast<long long>(heads), static_cast<long long>(seq),
      static_cast<long long>(dim), causal ? 1 : 0, dropout, threads, ms, peak);
  return 0;
}
