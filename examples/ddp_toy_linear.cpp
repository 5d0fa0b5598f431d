// Seed 002's DDP toy in C++: nn.Linear(20, 1) trained with SGD(lr=1e-3) and MSE on 2048 random
// samples, each rank reading its DistributedSampler shard.
//   lockstep run --nproc-per-node 2 ddp_toy_linear --max-epochs 5 --batch-size 32
// Per epoch each rank prints "[rank R] Epoch E | Batchsize B | Steps S" (Steps = 2048/B/world);
// rank 0 ends with "final_loss=<mean MSE over the data set>".
#include <CLI/CLI.hpp>
#include <cstdio>

#include "lockstep/autograd.h"
#include "lockstep/data.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"

using namespace lockstep;

int main(int argc, char** argv) {
  int max_epochs = 5;
  int64_t batch_size = 32;
  std::string precision = "fp32";
  CLI::App app{"Seed 002's DistributedDataParallel toy: Linear(20, 1) on random data"};
  app.add_option("--max-epochs,--max_epochs", max_epochs, "total epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size,--batch_size", batch_size, "batch size per rank")->check(CLI::PositiveNumber);
  app.add_option(
         "--precision", precision,
         "fp32, or bf16 / fp16 autocast with f32 master weights (fp16 also scales the loss dynamically)")
      ->check(CLI::IsMember(parallel::precisionNames()));
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines reach log files as they happen
  try {
    auto dataset = std::make_shared<data::SyntheticRegressionDataset>(data::SyntheticRegressionOptions{});
    Generator g(0);
    nn::ModelOptions mo;
    mo.in_features = 20;
    mo.out_features = 1;
    mo.generator = &g;
    auto model = nn::makeModel("linear", mo);
    optim::SGDOptions so;
    so.lr = 1e-3;
    auto opt = std::make_shared<optim::SGD>(model->parameters(), so);
    parallel::PrepareOptions po;
    po.loader.batch_size = batch_size;
    po.engine.precision = parallel::parsePrecision(precision);
    po.loader.shuffle = true;
    auto job = parallel::prepare(model, opt, dataset, po);
    parallel::Engine& engine = *job.engine;
    nn::MSELoss mse;
    for (int epoch = 0; epoch < max_epochs; ++epoch) {
      job.setEpoch(static_cast<uint64_t>(epoch));
      std::printf("[rank %d] Epoch %d | Batchsize %lld | Steps %lld\n", job.env().rank(), epoch,
                  static_cast<long long>(batch_size), static_cast<long long>(job.loader->size()));
      for (data::Batch& b : *job.loader) {
        engine.backward(mse(engine.forward(autograd::Variable(b.input)), b.target));
        engine.step();
      }
    }
    autograd::NoGradGuard ng;
    double loss = mse(model->forward(autograd::Variable(dataset->inputs())), dataset->targets()).item();
    if (job.isMain()) std::printf("final_loss=%.6f\n", loss);
    return 0;
  } catch (const ValueError& e) {
    std::fprintf(stderr, "ddp_toy_linear: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_toy_linear: error: %s\n", e.what());
    return 1;
  }
}
