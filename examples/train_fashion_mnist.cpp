// Trains the seed MNIST CNN (mnist_cnn) with Adam on Fashion-MNIST, as a user of the library would.
//   train_fashion_mnist [--data-dir DIR] [--epochs N] [--max-steps N] [--batch-size B] [--lr LR]
//                       [--warmup-steps N]
// Ends with one line:
//   test_accuracy=<0..1> samples_per_second=<training samples/s> steps=<n>
// samples/s leaves out the first --warmup-steps steps (oneDNN builds its kernels in the first one).
// Started with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set (e.g. by `lockstep run`), it trains
// data-parallel: --batch-size is per rank, rank 0 prints the line, samples/s counts all ranks and
// the slowest rank's training time (the job is done when every rank is; with --comm-hook noop the
// ranks do not wait for each other, so rank 0's own clock would overstate it).
// --ddp-timings: every rank also prints to stderr where its training steps' time went
//   rank=<r> step_ms=<mean> <DistributedDataParallel::timings(), see formatTimings>
// --comm-hook and --gradient-as-bucket-view set the DistributedDataParallel options of those names.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "lockstep/autograd.h"
#include "lockstep/comm/backend_registry.h"
#include "lockstep/data.h"
#include "lockstep/kernels.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "lockstep/train/train_data.h"

using namespace lockstep;

namespace {

struct Args {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 5;
  int64_t max_steps = 0;
  int64_t warmup_steps = 0;
  int64_t batch_size = 64;
  double lr = 1e-3;
  uint64_t seed = 1;
  int64_t num_workers = 1;
  std::string backend = "auto";
  double timeout_s = 0;  // 0: LOCKSTEP_TIMEOUT, else the default
  std::string precision = "fp32";
  bool ddp_timings = false;
  std::string comm_hook = "allreduce";
  bool gradient_as_bucket_view = false;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Train the seed MNIST CNN on Fashion-MNIST"};
  app.add_option("--data-dir", a.data_dir, "directory with the Fashion-MNIST IDX files (gzip or raw)");
  app.add_option("--epochs", a.epochs, "epochs to train")->check(CLI::PositiveNumber);
  app.add_option("--max-steps", a.max_steps, "stop after this many steps (0 = no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-steps", a.warmup_steps, "steps left out of samples/s and the DDP timings")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", a.batch_size, "samples per step (per rank)")->check(CLI::PositiveNumber);
  app.add_option("--lr", a.lr, "Adam learning rate")->check(CLI::PositiveNumber);
  app.add_option("--seed", a.seed, "seed of the model init and the shuffling");
  app.add_option("--num-workers", a.num_workers, "DataLoader worker threads")->check(CLI::NonNegativeNumber);
  app.add_option("--timeout", a.timeout_s,
                 "collective timeout in seconds, like torch's init_process_group(timeout=) (default: "
                 "$LOCKSTEP_TIMEOUT, else 300)")
      ->check(CLI::Range(0.001, 864000.0));
  app.add_option(
         "--precision", a.precision,
         "fp32, or bf16 / fp16 autocast with f32 master weights (fp16 also scales the loss dynamically)")
      ->check(CLI::IsMember(parallel::precisionNames()));
  app.add_option("--backend", a.backend,
                 "process group backend when distributed: " + comm::backendNamesText());
  app.add_flag("--ddp-timings", a.ddp_timings,
               "when distributed, each rank prints its mean step time and DDP's forward/backward/comm split");
  app.add_option("--comm-hook", a.comm_hook,
                 "when distributed: allreduce, fp16_compress, bf16_compress, or noop (no gradient sync: to "
                 "measure what synchronisation costs, not to train)")
      ->check(CLI::IsMember({"allreduce", "fp16_compress", "bf16_compress", "noop"}));
  app.add_flag("--gradient-as-bucket-view", a.gradient_as_bucket_view,
               "when distributed, gradients live in DDP's buckets (no copy back after the allreduce)");
  CLI11_PARSE(app, argc, argv);
  if (a.max_steps > 0 && a.warmup_steps >= a.max_steps) {
    std::fprintf(
        stderr,
        "train_fashion_mnist: error: --warmup-steps %lld leaves no step of --max-steps %lld to time; "
        "lower it or raise --max-steps\n",
        static_cast<long long>(a.warmup_steps), static_cast<long long>(a.max_steps));
    return 2;
  }

  try {
    auto dist = parallel::initFromEnvironment(
        a.backend, std::chrono::milliseconds(static_cast<int64_t>(
                       a.timeout_s * 1000.0)));  // world of 1 when not launched distributed
    const int rank = dist.rank(), world = dist.worldSize();
    data::MnistOptions mo;
    mo.mean = 0.2860;  // Fashion-MNIST's statistics
    mo.std = 0.3530;
    auto train = std::make_shared<data::TensorDataset>(data::loadMnist(a.data_dir, data::Split::train, mo));
    auto test = std::make_shared<data::TensorDataset>(data::loadMnist(a.data_dir, data::Split::test, mo));

    Generator init_gen(a.seed);
    nn::ModelOptions model_opts;
    model_opts.generator = &init_gen;
    parallel::EngineOptions eo;
    eo.optimizer = {"Adam", {{"lr", a.lr}}};
    eo.ddp.comm_hook = a.comm_hook;
    eo.precision = parallel::parsePrecision(a.precision);
    eo.ddp.gradient_as_bucket_view = a.gradient_as_bucket_view;
    parallel::Engine engine(nn::makeModel("mnist_cnn", model_opts), eo, dist);
    parallel::DistributedDataParallel* ddp = engine.ddp();
    nn::Module& model = *engine.module();
    nn::CrossEntropyLoss criterion;

    data::DataLoaderOptions lo;
    lo.batch_size = a.batch_size;
    lo.num_workers = a.num_workers;
    lo.shuffle = true;
    lo.seed = a.seed;
    auto loader = engine.makeLoader(train, lo);

    // The slowest rank's training time: collective, so every rank calls it at the same point.
    auto job_seconds = [&](double mine) {
      return dist.group ? parallel::allreduceScalar(*dist.group, mine, comm::ReduceOp::max) : mine;
    };

    int64_t steps = 0, samples = 0;  // samples counts the timed steps (after the warm-up) of all ranks
    double train_seconds = 0, job_train_seconds = 0, test_accuracy = 0;
    bool done = false;
    for (int epoch = 0; epoch < a.epochs && !done; ++epoch) {
      loader->setEpoch(static_cast<uint64_t>(epoch));
      auto t0 = std::chrono::steady_clock::now();
      double last_loss = 0;
      for (data::Batch& b : *loader) {
        autograd::Variable loss = criterion(engine.forward(autograd::Variable(b.input)), b.target);
        engine.backward(loss);
        engine.step();
        samples += b.input.size(0) * world;
        if (++steps % 200 == 0) last_loss = loss.item();
        if (steps == a.warmup_steps) {  // the clock starts now
          t0 = std::chrono::steady_clock::now();
          train_seconds = 0;
          samples = 0;
          if (ddp) ddp->resetTimings();
        }
        if (a.max_steps > 0 && steps >= a.max_steps) {
          done = true;
          break;
        }
      }
      train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      job_train_seconds = job_seconds(train_seconds);
      auto [tl, acc] = train::evaluate(model, test, dist.group.get(), rank, world);
      test_accuracy = acc;
      if (rank == 0) {
        std::fprintf(
            stderr, "epoch %d: steps=%lld loss=%.4f test_loss=%.4f test_accuracy=%.4f samples/s=%.0f\n",
            epoch + 1, static_cast<long long>(steps), last_loss, tl, acc, samples / job_train_seconds);
      }
    }
    const int64_t timed_steps = steps - std::min(steps, a.warmup_steps);
    if (timed_steps == 0) {
      throw ValueError("--warmup-steps " + std::to_string(a.warmup_steps) + " covers all " +
                       std::to_string(steps) + " steps, so none was timed; lower it or train longer");
    }
    if (a.ddp_timings && ddp) {
      std::fprintf(stderr, "rank=%d step_ms=%.3f %s\n", rank,
                   1e3 * train_seconds / static_cast<double>(timed_steps),
                   parallel::formatTimings(ddp->timings()).c_str());
    }
    if (rank == 0) {
      const auto low = parallel::precisionDType(parallel::parsePrecision(a.precision));
      std::printf("test_accuracy=%.4f samples_per_second=%.1f steps=%lld precision=%s kernels=\"%s\"\n",
                  test_accuracy, samples / job_train_seconds, static_cast<long long>(steps),
                  a.precision.c_str(),
                  low ? kernels::precisionPath(*low).c_str() : kernels::precisionPath(DType::f32).c_str());
    }
    return 0;
  } catch (const ValueError& e) {
    std::fprintf(stderr, "train_fashion_mnist: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_fashion_mnist: error: %s\n", e.what());
    return 1;
  }
}
