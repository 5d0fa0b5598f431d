// A language model's output layer and its loss (GPT-2's: 768-wide rows, 50,257 words, 8 x 1024
// rows) forward and backward, two ways: `composed` (the logits of every row, then cross entropy:
// autograd::linear, autograd::crossEntropy) and `fused` (autograd::linearCrossEntropy, chunk by
// chunk: what GPT's and Llama's forwardLoss use). Prints the time of a step and the allocator's peak
// bytes beyond the inputs during it (tensor/allocator.h on the CPU; on a GPU the device allocator's).
// bf16 runs under autocast with an f32 weight (a model's master weight) and bf16 rows (ln_f's
// lowered output), as lockstep train's bf16 does.
//   bench_lm_head [--impl fused|composed] [--rows 8192 --vocab 50257 --embd 768 --steps 3
//                 --threads 1 --device cpu|cuda --dtype f32|bf16]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>

#include "bench/step_measure.h"
#include "lockstep/autograd.h"
#include "lockstep/kernels/threads.h"

using namespace lockstep;
using namespace lockstep::autograd;

namespace {

int run(const std::string& impl, int64_t rows, int64_t vocab, int64_t embd, int steps, int threads,
        const std::string& device_name, const std::string& dtype_name) {
  const bool gpu = device_name == "cuda";
  const bool bf16 = dtype_name == "bf16";
  const Device device = gpu ? Device::cuda(0) : Device::cpu();
  Generator gen(0);
  Tensor hidden = Tensor::empty({rows, embd}), weight = Tensor::empty({vocab, embd});
  gen.uniform(hidden, -1, 1);
  gen.uniform(weight, -0.05, 0.05);
  hidden = hidden.to(bf16 ? DType::bf16 : DType::f32).to(device);
  weight = weight.to(device);
  Tensor target = Tensor::empty({rows}, DType::i64);
  for (int64_t i = 0; i < rows; ++i) target.data<int64_t>()[i] = static_cast<int64_t>(gen.nextBelow(vocab));
  target = target.to(device);
  auto step = [&] {
    Variable x(hidden, true), w(weight, true);
    std::optional<AutocastGuard> autocast;
    if (bf16) autocast.emplace(DType::bf16);
    Variable loss =
        impl == "fused" ? linearCrossEntropy(x, w, target) : crossEntropy(linear(x, w, Variable()), target);
    autocast.reset();
    loss.backward();
    return x.grad().numel() + w.grad().numel();
  };
  const bench::StepMeasure m = bench::measureStep([&] { step(); }, steps, gpu);
  std::printf("impl=%s device=%s dtype=%s N=%lld V=%lld C=%lld threads=%d fwd_bwd_ms=%.2f peak_bytes=%zu\n",
              impl.c_str(), device_name.c_str(), dtype_name.c_str(), static_cast<long long>(rows),
              static_cast<long long>(vocab), static_cast<long long>(embd), threads, m.ms, m.peak_bytes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A language model's output layer and cross entropy: composed or fused, time and peak memory"};
  std::string impl = "fused", device_name = "cpu", dtype_name = "f32";
  int64_t rows = 8192, vocab = 50257, embd = 768;
  int steps = 3, threads = 1;
  app.add_option("--impl", impl, "fused or composed")->check(CLI::IsMember({"fused", "composed"}));
  app.add_option("--rows", rows, "rows N (tokens)");
  app.add_option("--vocab", vocab, "words V");
  app.add_option("--embd", embd, "row width C");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--threads", threads, "intra-op threads");
  app.add_option("--device", device_name, "cpu or cuda (GPU 0)")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", dtype_name, "f32, or bf16 (autocast)")->check(CLI::IsMember({"f32", "bf16"}));
  CLI11_PARSE(app, argc, argv);
  kernels::setNumThreads(threads);
  if (!bench::deviceBuiltIn("bench_lm_head", device_name)) return 2;
  try {
    return run(impl, rows, vocab, embd, steps, threads, device_name, dtype_name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_lm_head: %s\n", e.what());
    return 1;
  }
}
