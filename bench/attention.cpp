// Fused attention (autograd::scaledDotProductAttention) against the plain composition
// matmul -> softmax -> matmul, forward + backward: time per step and the allocator's peak bytes in
// use during the step (tensor/allocator.h on the CPU; on a GPU the device allocator's peak, as
// torch.cuda.max_memory_allocated). Run one configuration per process, so that each peak starts
// from an empty allocator (bench/attention.bench.sh runs the CPU sweep, bench/gpu_attention.bench.sh
// the GPU's beside PyTorch's SDPA).
//   bench_attention --impl fused|naive --seq 512 [--dim 64 --batch 1 --heads 1 --causal --dropout 0.1
//                   --threads 1 --device cpu|cuda --dtype f32|bf16|f16 --cudnn-nondeterministic
//                   --key-chunk N]
// --cudnn-nondeterministic: on a GPU, cuDNN's faster backward with atomics and scratch linear in T
// (torch.backends.cudnn.deterministic = False, PyTorch's default) instead of lockstep's default
// bitwise-repeatable one, whose scratch is B x H x T x T x 2 bytes in one call, taken a chunk of keys
// at a time past a bound (kernels/cuda/fused_attention.h). --key-chunk N: chunks of N keys (a
// multiple of 64) whatever the size, to time what chunking costs.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <string>

#include "bench/step_measure.h"
#include "lockstep/autograd.h"
#include "lockstep/kernels/gpu_math_options.h"
#include "lockstep/kernels/threads.h"
#if LOCKSTEP_WITH_CUDA
#include "lockstep/kernels/cuda/fused_attention.h"
#endif

using namespace lockstep;
using namespace lockstep::autograd;

int run(const std::string& impl, int64_t seq, int64_t dim, int64_t batch, int64_t heads, int steps,
        int threads, bool causal, double dropout, const std::string& device_name,
        const std::string& dtype_name);

int main(int argc, char** argv) {
  CLI::App app{"Fused vs naive attention: time and peak memory of forward + backward"};
  std::string impl = "fused";
  int64_t seq = 512, dim = 64, batch = 1, heads = 1, key_chunk = 0;
  int steps = 10, threads = 1;
  bool causal = false, nondeterministic = false;
  double dropout = 0.0;
  std::string device_name = "cpu", dtype_name = "f32";
  app.add_option("--impl", impl, "fused or naive")->check(CLI::IsMember({"fused", "naive"}));
  app.add_option("--device", device_name, "cpu or cuda (GPU 0)")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", dtype_name, "f32, bf16 or f16")->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--seq", seq, "sequence length T");
  app.add_option("--dim", dim, "head dim D");
  app.add_option("--batch", batch, "batch B");
  app.add_option("--heads", heads, "heads H");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--threads", threads, "intra-op threads");
  app.add_flag("--causal", causal, "causal mask");
  app.add_option("--dropout", dropout, "dropout on the attention weights (naive: dropout after softmax)");
  app.add_flag("--cudnn-nondeterministic", nondeterministic,
               "GPU: cuDNN's non-deterministic attention backward (scratch linear in T)");
  app.add_option("--key-chunk", key_chunk,
                 "GPU: cuDNN's backward in chunks of this many keys (multiple of 64)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  kernels::setNumThreads(threads);
  kernels::GpuMathOptions math = kernels::gpuMathOptions();
  math.cudnn_deterministic = !nondeterministic;
  kernels::setGpuMathOptions(math);
  if (!bench::deviceBuiltIn("bench_attention", device_name)) return 2;
  try {
#if LOCKSTEP_WITH_CUDA
    if (key_chunk > 0) kernels::cuda::setFusedAttentionKeyChunk(key_chunk);
#else
    if (key_chunk > 0) throw ValueError("--key-chunk: this build has no CUDA");
#endif
    return run(impl, seq, dim, batch, heads, steps, threads, causal, dropout, device_name, dtype_name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
}

int run(const std::string& impl, int64_t seq, int64_t dim, int64_t batch, int64_t heads, int steps,
        int threads, bool causal, double dropout, const std::string& device_name,
        const std::string& dtype_name) {
  const bool gpu = device_name == "cuda";
  const DType dtype = dtype_name == "bf16" ? DType::bf16 : dtype_name == "f16" ? DType::f16 : DType::f32;
  const Device device = gpu ? Device::cuda(0) : Device::cpu();
  Generator gen(0);
  Tensor tq = Tensor::empty({batch, heads, seq, dim}), tk = Tensor::empty({batch, heads, seq, dim});
  Tensor tv = Tensor::empty({batch, heads, seq, dim}), tg = Tensor::empty({batch, heads, seq, dim});
  gen.uniform(tq, -1, 1);
  gen.uniform(tk, -1, 1);
  gen.uniform(tv, -1, 1);
  gen.uniform(tg, -1, 1);
  for (Tensor* t : {&tq, &tk, &tv, &tg}) *t = t->to(dtype).to(device);
  Tensor mask;
  if (causal && impl == "naive") {
    mask = Tensor::zeros({seq, seq});
    float* m = mask.data<float>();
    for (int64_t i = 0; i < seq; ++i) {
      for (int64_t j = i + 1; j < seq; ++j) m[i * seq + j] = -INFINITY;
    }
    mask = mask.to(dtype).to(device);
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
  const bench::StepMeasure m = bench::measureStep([&] { step(); }, steps, gpu);
  // On a GPU: how many backward passes cuDNN ran a chunk of keys at a time (none: one call each).
  long long chunked = -1;
#if LOCKSTEP_WITH_CUDA
  if (gpu) chunked = static_cast<long long>(kernels::cuda::fusedAttentionChunkedRuns());
#endif
  std::printf(
      "impl=%s device=%s dtype=%s B=%lld H=%lld T=%lld D=%lld causal=%d dropout=%g threads=%d "
      "fwd_bwd_ms=%.3f "
      "peak_bytes=%zu%s\n",
      impl.c_str(), device_name.c_str(), dtype_name.c_str(), static_cast<long long>(batch),
      static_cast<long long>(heads), static_cast<long long>(seq), static_cast<long long>(dim), causal ? 1 : 0,
      dropout, threads, m.ms, m.peak_bytes,
      chunked >= 0 ? (" cudnn_chunked_backwards=" + std::to_string(chunked)).c_str() : "");
  return 0;
}
