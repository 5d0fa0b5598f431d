// Seed 001's PyTorchTrainingJob (DDP MNIST on Kubernetes) in C++: the CNN with logits (the seed's
// softmax before CrossEntropyLoss is a bug not copied), Adam(lr = 0.001 * world_size),
// StepLR(step_size=1, gamma=0.7), a 48000/12000 train/validation split, validation every epoch,
// a test at the end, and the model's state dict saved by rank 0 as safetensors.
//   lockstep run --nproc-per-node 2 mnist_ddp_job --data-dir DIR --epochs 3 --save-path model.safetensors
// Works on MNIST or Fashion-MNIST IDX files (Debian ships Fashion-MNIST).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "lockstep/autograd.h"
#include "lockstep/comm/backend_registry.h"
#include "lockstep/data.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "lockstep/train/checkpoint/safetensors.h"
#include "lockstep/train/train_data.h"

using namespace lockstep;

int main(int argc, char** argv) {
  std::string data_dir = "/usr/share/datasets/fashion-mnist", save_path, backend = "auto";
  double timeout_s = 0;  // 0: LOCKSTEP_TIMEOUT, else the default
  std::string precision = "fp32";
  int epochs = 3;
  int64_t batch_size = 32;
  CLI::App app{"Seed 001's DDP MNIST training job"};
  app.add_option("--data-dir", data_dir, "directory with the MNIST-format IDX files");
  app.add_option("--epochs", epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "batch size per rank")->check(CLI::PositiveNumber);
  app.add_option("--save-path,--save_path", save_path,
                 "where rank 0 saves the model's state dict (safetensors)");
  app.add_option("--timeout", timeout_s,
                 "collective timeout in seconds, like torch's init_process_group(timeout=) (default: "
                 "$LOCKSTEP_TIMEOUT, else 300)")
      ->check(CLI::Range(0.001, 864000.0));
  app.add_option(
         "--precision", precision,
         "fp32, or bf16 / fp16 autocast with f32 master weights (fp16 also scales the loss dynamically)")
      ->check(CLI::IsMember(parallel::precisionNames()));
  app.add_option("--backend", backend, "process group backend: " + comm::backendNamesText());
  CLI11_PARSE(app, argc, argv);
  try {
    auto full = std::make_shared<data::TensorDataset>(data::loadMnist(data_dir, data::Split::train));
    auto test = std::make_shared<data::TensorDataset>(data::loadMnist(data_dir, data::Split::test));
    auto parts = data::randomSplit(full, {48000, 12000}, 1);
    auto model = nn::makeModel("mnist_cnn");
    auto env = parallel::initFromEnvironment(
        backend, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0)));
    const int rank = env.rank(), world = env.worldSize();
    // Adam's "weight_decay" stays 0, so Adam and AdamW are the same update here.
    parallel::EngineOptions eo;
    eo.optimizer = {"Adam", {{"lr", 0.001 * world}}};
    eo.precision = parallel::parsePrecision(precision);
    parallel::Engine engine(model, eo, env);
    // The seed steps StepLR once per epoch (the engine's schedulers count optimizer steps).
    optim::StepLR scheduler(*engine.optimizer(), {.step_size = 1, .gamma = 0.7});
    nn::Module& net = *engine.module();
    // The seed's DistributedSampler(shuffle=True) on every world size, a world of one included.
    data::DistributedSamplerOptions so;
    so.num_replicas = world;
    so.rank = rank;
    so.seed = 1;
    data::DataLoaderOptions lo;
    lo.batch_size = batch_size;
    data::DataLoader loader(parts[0], std::make_shared<data::DistributedSampler>(parts[0]->size(), so), lo);
    nn::CrossEntropyLoss criterion;
    const int64_t log_every = std::max<int64_t>(1, 500 / world);
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      loader.setEpoch(static_cast<uint64_t>(epoch));
      int64_t step = 0;
      for (data::Batch& b : loader) {
        autograd::Variable loss = criterion(engine.forward(autograd::Variable(b.input)), b.target);
        engine.backward(loss);
        engine.step();
        if (++step % log_every == 0 && rank == 0) {
          std::printf("epoch %d/%d, batch %5lld/%lld with loss: %.4f\n", epoch, epochs,
                      static_cast<long long>(step), static_cast<long long>(loader.size()), loss.item());
        }
      }
      scheduler.step();
      auto [vl, va] = train::evaluate(net, parts[1], env.group.get(), rank, world);
      if (rank == 0)
        std::printf("epoch %d: val_loss=%.4f val_accuracy=%.4f lr=%g\n", epoch, vl, va,
                    scheduler.lastLr()[0]);
    }
    auto [tl, ta] = train::evaluate(net, test, env.group.get(), rank, world);
    if (rank == 0) {
      std::printf("test_loss=%.4f test_accuracy=%.4f\n", tl, ta);
      if (!save_path.empty()) {
        train::NamedTensors tensors;
        for (const auto& [name, t] : model->stateDict()) tensors.emplace_back(name, t);
        train::saveSafetensors(save_path, tensors, {{"format", "pt"}});
        std::printf("saved the model's state dict to %s\n", save_path.c_str());
      }
    }
    return 0;
  } catch (const ValueError& e) {
    std::fprintf(stderr, "mnist_ddp_job: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist_ddp_job: error: %s\n", e.what());
    return 1;
  }
}
