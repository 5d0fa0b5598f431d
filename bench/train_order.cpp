// The sample order `lockstep train` feeds one rank, one line per optimizer step (the indices of that
// step's micro-batch, space separated), so that a peer written in another framework can train on
// exactly the same batches (bench/gpt_val_loss.bench.sh). It builds the sampler the trainer picks
// (parallel::makeTrainSampler: a shuffling DistributedSampler with the config's seed, a RandomSampler
// at one rank) and runs it through a real DataLoader, epoch after epoch, as the trainer does.
//   bench_train_order --samples N --batch B --steps K [--world W --rank R --seed S]
#include <CLI/CLI.hpp>
#include <cstdio>

#include "lockstep/data.h"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"Print the per-step sample indices lockstep train uses on one rank"};
  int64_t samples = 0, batch = 8, steps = 0, world = 1, rank = 0;
  uint64_t seed = 1;
  app.add_option("--samples", samples, "training samples (windows)")->required();
  app.add_option("--batch", batch, "micro-batch per rank");
  app.add_option("--steps", steps, "steps to print")->required();
  app.add_option("--world", world, "ranks");
  app.add_option("--rank", rank, "this rank");
  app.add_option("--seed", seed, "the config's seed");
  CLI11_PARSE(app, argc, argv);
  std::shared_ptr<data::Sampler> sampler;
  if (world > 1) {
    data::DistributedSamplerOptions so;
    so.num_replicas = world;
    so.rank = rank;
    so.seed = seed;
    sampler = std::make_shared<data::DistributedSampler>(samples, so);
  } else {
    sampler = std::make_shared<data::RandomSampler>(samples, seed);
  }
  // The dataset's input is the sample index itself, so a batch's input lists the indices.
  Tensor index = Tensor::empty({samples}, DType::i64);
  for (int64_t i = 0; i < samples; ++i) index.data<int64_t>()[i] = i;
  auto ds = std::make_shared<data::TensorDataset>(index, index);
  data::DataLoaderOptions lo;
  lo.batch_size = batch;
  data::DataLoader loader(ds, sampler, lo);
  int64_t printed = 0;
  for (uint64_t epoch = 0; printed < steps; ++epoch) {
    loader.setEpoch(epoch);
    for (data::Batch& b : loader) {
      const int64_t* p = b.input.data<int64_t>();
      for (int64_t i = 0; i < b.input.size(0); ++i)
        std::printf(i ? " %lld" : "%lld", static_cast<long long>(p[i]));
      std::printf("\n");
      if (++printed == steps) break;
    }
  }
  return 0;
}
