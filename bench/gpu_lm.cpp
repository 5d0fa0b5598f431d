// Language-model training steps on one GPU: lockstep's gpt (nn/models/gpt.h) trained on fixed
// random tokens with AdamW (lockstep's multi-tensor update; lr 6e-4, betas 0.9/0.95, weight decay
// 0.1 on every parameter, no clipping) and cross entropy over every position, in the two cases of
// issue 39:
//   gpt-mini  batch 64 x block 256, vocabulary 256 (the byte tokenizer's: 2,767,872 parameters, the
//             issue's "2.8M"), dropout 0.1 (minGPT's)
//   gpt2      GPT-2 small, batch 16 x block 1024, vocabulary 50257 (124,439,808 parameters),
//             dropout 0 (nanoGPT's default, what its speed figures use)
// each in f32 (TF32 off, PyTorch's default too) and bf16 autocast. The same steps as
// bench/scripts/torch_gpu_lm.py, which bench/gpu_lm.bench.sh runs beside it on the same GPU. Each
// step runs two ways:
//   eager  forward, loss, backward and the optimizer step launched op by op (optim::AdamW)
//   graph  the trainer's `cuda_graph` path: an Engine (one process, no DDP) stepped through a
//          parallel::StepGraph, the whole step captured once as a CUDA graph and replayed
// The first line names the GPU, the driver, cuDNN, the CUDA runtime and the GPU's dense bf16 peak
// (peak_flops=, train::denseBf16PeakFlops; LOCKSTEP_GPU_PEAK_TFLOPS sets it). Then one line per
// case: tokens/s, MFU (train::trainingFlopsPerToken, nanoGPT's 6N + 12LHQT, over that bf16 peak, for
// f32 too, as nanoGPT reports it) when the peak is known, the last loss and the case's peak of GPU
// memory in tensors (`failed:` and the reason when a case throws; the others still run, and the
// exit status is 1). The loss is the trainer's: GPT's output layer and cross entropy as one chunked
// op (nn::LanguageModel::forwardLoss); LOCKSTEP_FUSED_LM_LOSS=0 makes the logits whole, then the loss.
//   bench_gpu_lm [--models gpt-mini,gpt2] [--modes eager,graph] [--dtypes f32,bf16]
//                [--steps 100] [--warmup 10] [--profile-step]
//   bench_gpu_lm --count-params [--models ...]   (on the CPU: parameters and FLOPs per token)
// gpt2 times max(steps/4, 10) steps after max(warmup/2, 5), as the PyTorch side does.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>

#include "bench/gpu_bench.h"
#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "lockstep/train/monitor/model_flops.h"
#include "lockstep/train/train_data.h"

using namespace lockstep;

namespace {

/// A benchmark case's model (a gpt preset) and what it is fed.
struct LmShape {
  int64_t vocab, batch, block;
  double dropout;
};

LmShape lmShape(const std::string& model) {
  if (model == "gpt2") return {50257, 16, 1024, 0.0};
  return {256, 64, 256, 0.1};
}

struct Case {
  std::string model;
  LmShape shape;
  std::string dtype;
  int steps, warmup;
};

Case caseOf(const std::string& model, const std::string& dtype, int steps, int warmup) {
  if (model == "gpt2")
    return {model, lmShape(model), dtype, std::max(steps / 4, 10), std::max(warmup / 2, 5)};
  return {model, lmShape(model), dtype, steps, warmup};
}

std::shared_ptr<nn::Module> makeGpt(const std::string& model, Generator& gen) {
  const LmShape shape = lmShape(model);
  nn::ModelOptions mo;
  mo.model_type = model;
  mo.vocab_size = shape.vocab;
  mo.block_size = shape.block;
  mo.dropout = shape.dropout;
  mo.generator = &gen;
  return nn::makeModel("gpt", mo);
}

int64_t parameterCount(const nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.tensor().numel();
  return n;
}

/// The case's model on the GPU in training mode, its input tokens and their next tokens (fixed
/// random tokens: one stream of block + 1 per row, the target the input shifted by one).
struct Setup {
  std::shared_ptr<nn::Module> model;
  Tensor x, y;
};

Setup setup(const Case& c) {
  const Device dev = Device::cuda(0);
  Generator gen(0);
  Setup s;
  s.model = makeGpt(c.model, gen);
  s.model->to(dev);
  s.model->train();
  const int64_t b = c.shape.batch, t = c.shape.block;
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<int64_t> token(0, c.shape.vocab - 1);
  std::vector<int64_t> stream(static_cast<size_t>(b * (t + 1)));
  for (int64_t& v : stream) v = token(rng);
  std::vector<int64_t> x, y;
  for (int64_t i = 0; i < b; ++i) {
    const auto row = stream.begin() + i * (t + 1);
    x.insert(x.end(), row, row + t);
    y.insert(y.end(), row + 1, row + t + 1);
  }
  s.x = Tensor::fromVector(x, {b, t}).to(dev);
  s.y = Tensor::fromVector(y, {b, t}).to(dev);
  return s;
}

optim::AdamWOptions adamW() {
  optim::AdamWOptions o;
  o.lr = 6e-4;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.weight_decay = 0.1;
  return o;
}

/// Mean cross entropy over every position: logits [B, T, V] (f32, or bf16 under autocast), targets [B, T].
autograd::Variable lmLoss(const autograd::Variable& logits, const Tensor& target) {
  return autograd::crossEntropy(train::flattenPositions(logits), train::flattenPositions(target));
}

/// The step's loss as lockstep train takes it (train::microBatchLoss): GPT's output layer and cross
/// entropy as one op (LanguageModel::forwardLoss), or with LOCKSTEP_FUSED_LM_LOSS=0 the logits, then
/// cross entropy.
autograd::Variable stepLoss(nn::Module& model, const Tensor& x, const Tensor& y) {
  if (train::fusedLanguageModelLoss())
    return dynamic_cast<nn::LanguageModel&>(model).forwardLoss(autograd::Variable(x), y);
  return lmLoss(model(autograd::Variable(x)), y);
}

struct Result {
  double seconds, loss;
  int64_t params;
  double flops_per_token;
};

Result runEager(const Case& c) {
  Setup s = setup(c);
  optim::AdamW opt(s.model->parameters(), adamW());
  autograd::Variable loss;
  auto step = [&] {
    std::optional<autograd::AutocastGuard> ac;
    if (c.dtype == "bf16") ac.emplace(DType::bf16);
    // The loss inside the autocast scope, as nanoGPT's (and the engine's forwardLoss): cross entropy
    // reads the bf16 logits in place, with the f32 loss it gives on them widened.
    loss = stepLoss(*s.model, s.x, s.y);
    ac.reset();
    opt.zeroGrad();
    loss.backward();
    opt.step();
  };
  const double sec = bench::timeSteps(step, c.warmup, c.steps);
  return {sec, loss.item(), parameterCount(*s.model), *train::trainingFlopsPerToken(*s.model, c.shape.block)};
}

Result runGraph(const Case& c) {
  Setup s = setup(c);
  parallel::EngineOptions eo;
  // bf16: the engine runs forward and the loss under autocast (forwardLoss), as the eager step.
  eo.precision = c.dtype == "bf16" ? parallel::Precision::bf16 : parallel::Precision::fp32;
  parallel::Engine engine(s.model, std::make_shared<optim::AdamW>(s.model->parameters(), adamW()), eo,
                          parallel::DistributedEnvironment{});
  nn::CrossEntropyLoss criterion;
  parallel::StepGraph graph(
      engine,
      [&](const Tensor& x, const Tensor& y) { return train::microBatchLoss(engine, criterion, x, y); },
      bench::kGraphEagerSteps);
  const auto [sec, loss] = bench::timeGraphSteps(graph, s.x, s.y, c.warmup, c.steps);
  return {sec, loss, parameterCount(*s.model), *train::trainingFlopsPerToken(*s.model, c.shape.block)};
}

/// bf16 parameters with f32 master weights (ZeRO stage 1 on one rank: the partition is every
/// parameter, as DeepSpeed's bf16 layout): no per-forward weight casts, the optimizer steps f32
/// copies and rounds them into the parameters. Eager (the engine does not replay ZeRO as a graph).
Result runMaster(const Case& c) {
  Setup s = setup(c);
  parallel::EngineOptions eo;
  eo.precision = parallel::Precision::bf16;
  eo.zero_stage = 1;
  eo.zero.param_dtype = DType::bf16;
  parallel::Engine engine(s.model, std::make_shared<optim::AdamW>(s.model->parameters(), adamW()), eo,
                          parallel::DistributedEnvironment{});
  autograd::Variable loss;
  nn::CrossEntropyLoss criterion;
  auto step = [&] {
    loss = train::microBatchLoss(engine, criterion, s.x, s.y);
    engine.backward(loss);
    engine.step();
  };
  const double sec = bench::timeSteps(step, c.warmup, c.steps);
  return {sec, loss.item(), parameterCount(*s.model), *train::trainingFlopsPerToken(*s.model, c.shape.block)};
}

std::string caseKeys(const Case& c) {
  return "model=" + c.model + " batch=" + std::to_string(c.shape.batch) +
         " block=" + std::to_string(c.shape.block) + " vocab=" + std::to_string(c.shape.vocab) +
         " dtype=" + c.dtype;
}

/// Runs one case and prints its line; false (after a `failed:` line) when it threw.
bool measure(const Case& c, const std::string& mode, std::optional<double> peak_flops) {
  const std::string head = "impl=lockstep-" + mode + " " + caseKeys(c);
  return bench::measure(head, [&] {
    const Result r = mode == "graph" ? runGraph(c) : mode == "master" ? runMaster(c) : runEager(c);
    const double tokens_per_s = static_cast<double>(c.shape.batch * c.shape.block) * c.steps / r.seconds;
    const std::string mfu =
        peak_flops ? bench::formatted(" mfu=%.4f", tokens_per_s * r.flops_per_token / *peak_flops) : "";
    return bench::formatted("params=%lld step_us=%.1f tokens_per_s=%.0f%s loss=%.4f",
                            static_cast<long long>(r.params), 1e6 * r.seconds / c.steps, tokens_per_s,
                            mfu.c_str(), r.loss);
  });
}

/// --count-params: each model built on the CPU, its parameters and training FLOPs per token (what
/// torch_gpu_lm.py --count-params prints for its twin, so the two can be compared without a GPU).
void countParams(const std::vector<std::string>& models) {
  for (const std::string& m : models) {
    Generator gen(0);
    const std::shared_ptr<nn::Module> model = makeGpt(m, gen);
    const LmShape shape = lmShape(m);
    std::printf("model=%s vocab=%lld block=%lld params=%lld flops_per_token=%.0f\n", m.c_str(),
                static_cast<long long>(shape.vocab), static_cast<long long>(shape.block),
                static_cast<long long>(parameterCount(*model)),
                *train::trainingFlopsPerToken(*model, shape.block));
  }
}

/// The first line: GPU, driver, cuDNN (the library loaded, and the headers built against), CUDA and
/// the GPU's dense bf16 peak, which it returns: what MFU is measured against (unknown: no mfu= keys).
std::optional<double> printVersions() {
#if LOCKSTEP_WITH_CUDA
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const std::optional<double> peak = train::denseBf16PeakFlops(prop.name);
  bench::printVersions(prop,
                       " peak_flops=" + (peak ? std::to_string(static_cast<long long>(*peak)) : "unknown"));
  return peak;
#else
  return std::nullopt;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times training steps of gpt-mini and GPT-2 small on a GPU (tokens/s, MFU)"};
  std::string models = "gpt-mini,gpt2", modes = "eager,graph", dtypes = "f32,bf16";
  int steps = 100, warmup = 10;
  bool count_params = false;
  bench::addCaseOptions(app, models, "comma-separated: gpt-mini (64 x 256), gpt2 (16 x 1024)", modes, dtypes);
  app.get_option("--modes")->description(
      "comma-separated: eager (op by op), graph (StepGraph: one CUDA graph a step), master (bf16 only: bf16 "
      "parameters with f32 master weights, ZeRO stage 1 on one rank, eager)");
  app.add_option("--steps", steps, "timed steps per gpt-mini case (gpt2: max(steps/4, 10))")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first (gpt2: max(warmup/2, 5))")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--profile-step", bench::g_profile_step,
               "run one step after each case's warmup inside cudaProfilerStart/Stop (for ncu "
               "--profile-from-start off)");
  app.add_flag(
      "--count-params", count_params,
      "build the models on the CPU, print their parameters and FLOPs per token, and exit (no GPU needed)");
  CLI11_PARSE(app, argc, argv);
  try {
    bench::checkNames("--models", bench::split(models), {"gpt-mini", "gpt2"});
    bench::checkNames("--modes", bench::split(modes), {"eager", "graph", "master"});
    bench::checkNames("--dtypes", bench::split(dtypes), {"f32", "bf16"});
    if (count_params) {
      countParams(bench::split(models));
      return 0;
    }
    checkDeviceAvailable(Device::cuda(0));
#if LOCKSTEP_WITH_CUDA
    cuda::DeviceGuard guard(0);
#endif
    const std::optional<double> peak_flops = printVersions();
    bool all_ok = true;
    for (const std::string& m : bench::split(models)) {
      for (const std::string& d : bench::split(dtypes)) {
        const Case c = caseOf(m, d, steps, warmup);
        for (const std::string& mode : bench::split(modes)) {
          if (mode == "master" && d != "bf16") continue;  // master weights are bf16's layout
          all_ok = measure(c, mode, peak_flops) && all_ok;
        }
      }
    }
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_lm: %s\n", e.what());
    return 1;
  }
}
