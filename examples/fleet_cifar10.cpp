// Seed 000's Paddle Fleet collective training of a CIFAR-10 CNN (MyNet) in C++: Adam(1e-3), batch
// 32 per rank, DistributedBatchSampler(shuffle, drop_last) for training and validation.
//   lockstep run --nproc-per-node 2 fleet_cifar10 --data-dir DIR --epochs 10
// DIR is CIFAR-10 as data::findCifar10 finds it: the python or binary version's folder, torchvision's
// root, or the downloaded .tar.gz (Paddle's ~/.cache/paddle/dataset/cifar/cifar-10-python.tar.gz).
// Without --data-dir, a small learnable CIFAR-format data set is generated first (CIFAR-10 is not
// packaged here).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "lockstep/autograd.h"
#include "lockstep/comm/backend_registry.h"
#include "lockstep/data.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"

using namespace lockstep;

int main(int argc, char** argv) {
  std::string data_dir, backend = "auto";
  double timeout_s = 0;  // 0: LOCKSTEP_TIMEOUT, else the default
  std::string precision = "fp32";
  int epochs = 10;
  int64_t batch_size = 32, synthetic_per_file = 200;
  CLI::App app{"Seed 000's Fleet CIFAR-10 training"};
  app.add_option(
      "--data-dir", data_dir,
      "CIFAR-10's folder or downloaded .tar.gz (python or binary version); empty = generate a synthetic set");
  app.add_option("--epochs", epochs, "epochs")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size, "batch size per rank")->check(CLI::PositiveNumber);
  app.add_option("--synthetic-per-file", synthetic_per_file, "records per generated training file");
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
    auto env = parallel::initFromEnvironment(
        backend, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0)));
    std::string generated;
    if (data_dir.empty()) {
      // Every rank generates the same deterministic files into its own directory.
      generated = (std::filesystem::temp_directory_path() / ("lockstep-cifar-" + std::to_string(::getpid())))
                      .string();
      std::filesystem::create_directories(generated);
      data::SyntheticCifarOptions sco;
      sco.train_per_file = synthetic_per_file;
      sco.test_samples = synthetic_per_file;
      data::writeSyntheticCifar10(generated, sco);
      data_dir = generated;
    }
    auto train = std::make_shared<data::TensorDataset>(data::loadCifar10(data_dir, data::Split::train));
    auto valid = std::make_shared<data::TensorDataset>(data::loadCifar10(data_dir, data::Split::test));
    auto model = nn::makeModel("cifar_cnn");  // MyNet
    // fleet.distributed_model + fleet.distributed_optimizer: the engine wraps the model in DDP,
    // which already averages the gradients the optimizer sees.
    parallel::EngineOptions eo;
    eo.optimizer = {"Adam", {{"lr", 0.001}}};
    eo.precision = parallel::parsePrecision(precision);
    parallel::Engine engine(model, eo, env);
    nn::Module& net = *engine.module();
    const int rank = env.rank();
    auto sampler = [&](int64_t n, bool shuffle) {  // Paddle's DistributedBatchSampler, as the seed
      data::DistributedBatchSamplerOptions o;
      o.batch_size = batch_size;
      o.num_replicas = env.worldSize();
      o.rank = rank;
      o.shuffle = shuffle;
      return std::make_shared<data::DistributedBatchSampler>(n, o);
    };
    data::DataLoaderOptions lo;
    lo.batch_size = batch_size;
    lo.drop_last = true;
    data::DataLoader train_loader(train, sampler(train->size(), true), lo);
    data::DataLoader valid_loader(valid, sampler(valid->size(), false), lo);
    nn::CrossEntropyLoss criterion;
    double accuracy = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      train_loader.setEpoch(static_cast<uint64_t>(epoch));
      int64_t batch_id = 0;
      for (data::Batch& b : train_loader) {
        autograd::Variable loss = criterion(engine.forward(autograd::Variable(b.input)), b.target);
        engine.backward(loss);
        engine.step();
        if (batch_id++ % 50 == 0 && rank == 0) {
          std::printf("epoch: %d, batch_id: %lld, loss is: %.4f\n", epoch,
                      static_cast<long long>(batch_id - 1), loss.item());
        }
      }
      autograd::NoGradGuard ng;
      net.eval();
      double s[2] = {0, 0};
      for (data::Batch& b : valid_loader) {
        Tensor l = net.forward(autograd::Variable(b.input)).tensor().contiguous();
        for (int64_t i = 0; i < l.size(0); ++i) {
          const float* row = l.data<float>() + i * 10;
          s[0] += std::max_element(row, row + 10) - row == b.target.data<int64_t>()[i];
        }
        s[1] += static_cast<double>(l.size(0));
      }
      if (env.group) env.group->allreduce(s, 2, DType::f64)->wait();
      net.train();
      accuracy = s[1] > 0 ? s[0] / s[1] : 0;
      if (rank == 0) std::printf("epoch: %d, valid accuracy: %.4f\n", epoch, accuracy);
    }
    if (!generated.empty()) std::filesystem::remove_all(generated);
    if (rank == 0) std::printf("valid_accuracy=%.4f\n", accuracy);
    return 0;
  } catch (const ValueError& e) {
    std::fprintf(stderr, "fleet_cifar10: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fleet_cifar10: error: %s\n", e.what());
    return 1;
  }
}
