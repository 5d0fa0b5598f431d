// Pipeline training speed and bubble (issue 42): one stage per rank of a gpt split by layers
// (lockstep/parallel/pipeline/), trained on fixed random tokens with AdamW, GPipe or 1F1B over
// --micro-batches micro-batches. Run under a launcher (`lockstep run --nproc-per-node S`, or
// bench/pipeline.bench.sh's run_ranks); rank 0 prints every stage's measured idle fraction (the
// bubble) beside the schedule's theoretical (S - 1) / (M + S - 1) (equal stages), the stage's
// compute a step and the idle its schedule would have with the stages' measured forward and
// backward times and transfers that take no time (simulatePipeline), then the samples/s:
//   stage=0 idle=0.1234 theoretical=0.1111 compute_ms=95.1 ideal_for_these_costs=0.1180
//   samples_per_s=123.4 tokens_per_s=7898 schedule=1f1b stages=2 micro_batches=8 loss=5.2
// The split is explicit (--boundaries, default: the embedding with the first half of the blocks,
// the rest with the head; with --virtual-stages V the blocks in S x V equal parts), so that
// bench/scripts/torch_pipeline.py can cut its model at the same place; GPT's embedding stays tied
// to its output layer across the stages.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>

#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "lockstep/parallel/tensor_comm.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"pipeline-parallel gpt training speed and bubble"};
  std::string model_type = "gpt-mini", schedule = "1f1b", backend = "auto";
  int64_t block = 64, micro_batch = 4, micro_batches = 8, steps = 10, warmup = 3, virtual_stages = 1;
  std::vector<int64_t> boundaries;
  app.add_option("--model-type", model_type, "gpt preset");
  app.add_option("--block-size", block, "tokens per sequence");
  app.add_option("--micro-batch", micro_batch, "sequences per micro-batch");
  app.add_option("--micro-batches", micro_batches, "micro-batches per step");
  app.add_option("--schedule", schedule, "1f1b, gpipe or interleaved_1f1b")
      ->check(CLI::IsMember({"1f1b", "gpipe", "interleaved_1f1b"}));
  app.add_option("--virtual-stages", virtual_stages, "chunks per stage (interleaved_1f1b)");
  app.add_option(
      "--backend", backend,
      "process group backend (auto, as lockstep train: shm on one host; gloo, as PyTorch's side; mpi)");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--boundaries", boundaries, "stage boundaries over the layer sequence (default: halves)");
  CLI11_PARSE(app, argc, argv);
  try {
    parallel::DistributedEnvironment env = parallel::initFromEnvironment(backend);
    LOCKSTEP_ENFORCE(env.group != nullptr, ValueError,
                     "bench_pipeline needs 2 or more ranks (a launcher's variables)");
    const int stages = env.worldSize(), rank = env.rank();
    nn::ModelOptions mo;
    mo.model_type = model_type;
    mo.vocab_size = 256;
    mo.block_size = block;
    mo.dropout = 0.0;
    Generator init(42);
    mo.generator = &init;
    auto model = nn::makeModel("gpt", mo);
    const int64_t layers = static_cast<int64_t>(nn::layerSequence(*model).layers.size());
    if (boundaries.empty()) {  // the blocks halved (quartered, ...) between the parts
      const int64_t blocks = layers - 2, parts = stages * virtual_stages;
      boundaries.push_back(0);
      for (int64_t p = 1; p < parts; ++p) boundaries.push_back(1 + blocks * p / parts);
      boundaries.push_back(layers);
    }
    parallel::PipelineStageOptions o;
    o.schedule = parallel::parsePipelineSchedule(schedule);
    o.virtual_stages = virtual_stages;
    o.micro_batches = micro_batches;
    o.partition.stages = stages;
    o.partition.boundaries = boundaries;
    parallel::PipelineStage stage(*model, env.group, o);
    stage.train(true);
    optim::AdamWOptions adamw;
    adamw.lr = 3e-4;
    optim::AdamW opt(stage.parameters(), adamw);
    // Fixed random tokens: micro-batch m of every step is the same [micro_batch, block] ids.
    Generator data(7);
    std::vector<Tensor> inputs, targets;
    for (int64_t m = 0; m < micro_batches; ++m) {
      std::vector<int64_t> x, y;
      for (int64_t i = 0; i < micro_batch * (block + 1); ++i)
        x.push_back(static_cast<int64_t>(data.nextBelow(256)));
      for (int64_t b = 0; b < micro_batch; ++b)
        for (int64_t t = 0; t < block; ++t) y.push_back(x[static_cast<size_t>(b * (block + 1) + t + 1)]);
      std::vector<int64_t> xin;
      for (int64_t b = 0; b < micro_batch; ++b)
        for (int64_t t = 0; t < block; ++t) xin.push_back(x[static_cast<size_t>(b * (block + 1) + t)]);
      inputs.push_back(Tensor::fromVector<int64_t>(xin, {micro_batch, block}));
      targets.push_back(Tensor::fromVector<int64_t>(y, {micro_batch * block}));
    }
    const bool first = stage.stage() == 0, last = stage.stage() + 1 == stages;
    auto loss = [](const autograd::Variable& out, const Tensor& target) {
      return autograd::crossEntropy(autograd::reshape(out, {out.size(0) * out.size(1), out.size(2)}), target);
    };
    double last_loss = std::numeric_limits<double>::quiet_NaN(), idle = 0, compute = 0;
    // [stage][chunk][forward, backward]: this stage's summed over the timed steps, others 0.
    const auto chunks = static_cast<size_t>(virtual_stages);
    std::vector<double> costs(static_cast<size_t>(stages) * chunks * 2, 0.0);
    std::chrono::steady_clock::time_point start;
    for (int64_t s = 0; s < warmup + steps; ++s) {
      if (s == warmup) {
        env.group->barrier()->wait();
        start = std::chrono::steady_clock::now();
      }
      last_loss = stage.trainStep(first ? inputs : std::vector<Tensor>{},
                                  last ? targets : std::vector<Tensor>{}, loss, &opt);
      if (s >= warmup) {
        idle += stage.lastStepTimes().idleFraction();
        compute += stage.lastStepTimes().compute_s;
        for (size_t c = 0; c < chunks; ++c) {
          costs[(static_cast<size_t>(rank) * chunks + c) * 2] += stage.lastStepTimes().forward_s[c];
          costs[(static_cast<size_t>(rank) * chunks + c) * 2 + 1] += stage.lastStepTimes().backward_s[c];
        }
      }
    }
    env.group->barrier()->wait();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double theory = parallel::theoreticalBubble({stages, micro_batches, virtual_stages});
    // The bubble these stages' own compute times leave with transfers that take no time
    // (simulatePipeline): what is left of the measured idle is the transfers' and waits' cost.
    env.group->allreduce(costs.data(), costs.size(), DType::f64)->wait();
    parallel::PipelineCosts measured;
    const double per = static_cast<double>(steps * micro_batches);
    for (int64_t r = 0; r < stages; ++r) {
      measured.stage_forward.emplace_back();
      measured.stage_backward.emplace_back();
      for (size_t c = 0; c < chunks; ++c) {
        measured.stage_forward.back().push_back(costs[(static_cast<size_t>(r) * chunks + c) * 2] / per);
        measured.stage_backward.back().push_back(costs[(static_cast<size_t>(r) * chunks + c) * 2 + 1] / per);
      }
    }
    const std::vector<double> ideal = parallel::idleForStageCosts(
        parallel::parsePipelineSchedule(schedule), {stages, micro_batches, virtual_stages}, measured);
    // Each stage's idle fraction and the last stage's loss, gathered to rank 0, which prints them.
    const double loss_everywhere =
        parallel::allreduceScalar(*env.group, last ? last_loss : 0.0, comm::ReduceOp::sum);
    for (int r = 0; r < stages; ++r) {
      const double idle_r = parallel::allreduceScalar(
          *env.group, r == rank ? idle / static_cast<double>(steps) : 0.0, comm::ReduceOp::sum);
      const double compute_r = parallel::allreduceScalar(
          *env.group, r == rank ? compute / static_cast<double>(steps) : 0.0, comm::ReduceOp::sum);
      if (rank == 0) {  // compute_ms: the stage's forwards and backwards a step (balance)
        std::printf("stage=%d idle=%.4f theoretical=%.4f compute_ms=%.2f ideal_for_these_costs=%.4f\n", r,
                    idle_r, theory, 1e3 * compute_r, ideal[static_cast<size_t>(r)]);
      }
    }
    if (rank == 0) {
      const double samples = static_cast<double>(steps * micro_batches * micro_batch) / seconds;
      std::printf("samples_per_s=%.2f tokens_per_s=%.0f schedule=%s stages=%d micro_batches=%lld loss=%.4f\n",
                  samples, samples * static_cast<double>(block), schedule.c_str(), stages,
                  static_cast<long long>(micro_batches), loss_everywhere);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pipeline: %s\n", e.what());
    return 1;
  }
}
