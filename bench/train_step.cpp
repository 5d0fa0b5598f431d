// One training step (forward, backward, SGD update at lr 0.01) on fixed random data, timed at the
// given batch sizes, of
//   seed_cnn        the seed MNIST CNN (seed 001's Net: conv 1->32->64->64 3x3, max-pool 2, linear
//                   576->64->10, logits + cross-entropy), written out in autograd ops (default)
//   resnet18_cifar  the zoo's CIFAR ResNet-18 (3x32x32, 10 classes), channels_last, optim::SGD
//   resnet50        the zoo's ResNet-50 (3x224x224, 1000 classes), likewise
// Compare with bench/scripts/torch_train_step.py (bench/train_step.sh runs both).
//   bench_train_step [--model seed_cnn] [--batch 32,128] [--steps 200] [--warmup 20]
// Threads: LOCKSTEP_NUM_THREADS or OMP_NUM_THREADS (the comparison script sets 1).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>

#include "lockstep/autograd.h"
#include "lockstep/kernels.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"

using namespace lockstep;
using namespace lockstep::autograd;

namespace {

struct Param {
  Variable v;
  Param(Shape shape, int64_t fan_in, Generator& g) {
    Tensor t = Tensor::empty(shape);
    double b = 1.0 / std::sqrt(static_cast<double>(fan_in));
    g.uniform(t, -b, b);
    v = Variable(t, true);
  }
};

struct Net {
  Generator gen{0};
  Param c1w{{32, 1, 3, 3}, 9, gen}, c1b{{32}, 9, gen};
  Param c2w{{64, 32, 3, 3}, 288, gen}, c2b{{64}, 288, gen};
  Param c3w{{64, 64, 3, 3}, 576, gen}, c3b{{64}, 576, gen};
  Param d1w{{64, 576}, 576, gen}, d1b{{64}, 576, gen};
  Param d2w{{10, 64}, 64, gen}, d2b{{10}, 64, gen};
  std::vector<Variable*> params() {
    return {&c1w.v, &c1b.v, &c2w.v, &c2b.v, &c3w.v, &c3b.v, &d1w.v, &d1b.v, &d2w.v, &d2b.v};
  }
  Variable forward(const Variable& x) {
    Conv2dOptions cr;
    cr.fuse_relu = true;
    Pool2dOptions pool;
    // As nn::SmallCnn: conv -> max-pool -> relu as one batch-chunked op (the same values and
    // gradients as relu then pool).
    Variable h = conv2dMaxPool2d(x, c1w.v, c1b.v, {}, pool, true);
    h = conv2dMaxPool2d(h, c2w.v, c2b.v, {}, pool, true);
    h = conv2d(h, c3w.v, c3b.v, cr);
    h = flatten(h, 1);
    h = relu(linear(h, d1w.v, d1b.v));
    return linear(h, d2w.v, d2b.v);
  }
};

/// A step of `model` on fixed random data: returns the loss.
using Step = std::function<double()>;

Step seedCnnStep(Net& net, int64_t batch) {
  Tensor x = Tensor::empty({batch, 1, 28, 28});
  Generator g(1);
  g.uniform(x, 0, 1);
  Tensor y = Tensor::empty({batch}, DType::i64);
  for (int64_t i = 0; i < batch; ++i) y.data<int64_t>()[i] = i % 10;
  return [&net, xv = Variable(x), y] {
    Variable loss = crossEntropy(net.forward(xv), y);
    for (Variable* p : net.params()) p->zeroGrad();
    loss.backward();
    for (Variable* p : net.params()) kernels::addInto(p->tensor(), p->grad(), -0.01);
    return loss.item();
  };
}

Step zooStep(nn::Module& model, optim::Optimizer& opt, int64_t batch, int64_t side, int64_t classes) {
  Generator g(1);
  Tensor x = Tensor::empty({batch, 3, side, side});
  g.uniform(x, 0, 1);
  x = x.toFormat(MemoryFormat::channels_last);
  Tensor y = Tensor::empty({batch}, DType::i64);
  for (int64_t i = 0; i < batch; ++i) y.data<int64_t>()[i] = i % classes;
  return [&model, &opt, xv = Variable(x), y] {
    Variable loss = crossEntropy(model(xv), y);
    opt.zeroGrad();
    loss.backward();
    opt.step();
    return loss.item();
  };
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times one training step of the seed MNIST CNN, the CIFAR ResNet-18 or ResNet-50"};
  std::string model_name = "seed_cnn", batches = "32,128";
  int steps = 200, warmup = 20;
  app.add_option("--model", model_name, "seed_cnn, resnet18_cifar or resnet50")
      ->check(CLI::IsMember({"seed_cnn", "resnet18_cifar", "resnet50"}));
  app.add_option("--batch", batches, "comma-separated batch sizes");
  app.add_option("--steps", steps, "timed steps per batch size");
  app.add_option("--warmup", warmup, "untimed steps first");
  CLI11_PARSE(app, argc, argv);

  Net net;
  std::shared_ptr<nn::Module> zoo;
  std::unique_ptr<optim::SGD> opt;
  const bool imagenet = model_name == "resnet50";
  if (model_name != "seed_cnn") {
    Generator gen(0);
    nn::ModelOptions mo;
    mo.generator = &gen;
    mo.num_classes = imagenet ? 1000 : 10;
    zoo = nn::makeModel(model_name, mo);
    zoo->train();
    opt = std::make_unique<optim::SGD>(zoo->parameters(), optim::SGDOptions{.lr = 0.01});
  }
  std::stringstream ss(batches);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    const int64_t batch = std::stoll(tok);
    Step step =
        zoo ? zooStep(*zoo, *opt, batch, imagenet ? 224 : 32, imagenet ? 1000 : 10) : seedCnnStep(net, batch);
    double loss_value = 0;
    for (int i = 0; i < warmup; ++i) loss_value = step();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) loss_value = step();
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("impl=lockstep model=%s batch=%lld threads=%d step_ms=%.3f samples_per_s=%.0f loss=%.4f\n",
                model_name.c_str(), static_cast<long long>(batch), kernels::numThreads(),
                1000.0 * sec / steps, batch * steps / sec, loss_value);
  }
  return 0;
}
