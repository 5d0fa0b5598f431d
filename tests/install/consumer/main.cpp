// A program built outside lockstep's tree against the installed package: every umbrella header
// compiles from the install prefix alone, and a zoo model trains. Prints one line
//   consumer: trained mlp N steps, loss A -> B, parameters changed: yes
// and exits 0 only when the loss fell and the parameters moved.
#include <cstdio>
#include <exception>
#include <vector>

#include "lockstep/autograd.h"
#include "lockstep/comm.h"
#include "lockstep/data.h"
#include "lockstep/kernels.h"
#include "lockstep/launch.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"
#include "lockstep/parallel.h"
#include "lockstep/tensor.h"
#include "lockstep/train.h"
#include "lockstep/util.h"

using namespace lockstep;

int main() {
  try {
    constexpr int kSteps = 20;
    Generator gen(7);
    nn::ModelOptions mo;
    mo.in_features = 8;
    mo.hidden = {16};
    mo.out_features = 3;
    mo.generator = &gen;
    auto model = nn::makeModel("mlp", mo);

    // One fixed batch: 32 samples, the class of each is the index of its largest first-3 feature.
    Tensor x = Tensor::empty({32, 8});
    gen.normal(x, 0.0, 1.0);
    std::vector<int64_t> labels(32);
    const float* px = x.data<float>();
    for (int64_t i = 0; i < 32; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < 3; ++j) best = px[i * 8 + j] > px[i * 8 + best] ? j : best;
      labels[static_cast<size_t>(i)] = best;
    }
    Tensor y = Tensor::fromVector<int64_t>(labels, {32});

    const std::vector<float> before = model->parameters().front().tensor().toVector<float>();
    optim::AdamOptions ao;
    ao.lr = 1e-2;
    optim::Adam opt(model->parameters(), ao);
    nn::CrossEntropyLoss loss_fn;
    double first = 0, last = 0;
    for (int step = 0; step < kSteps; ++step) {
      opt.zeroGrad();
      autograd::Variable loss = loss_fn((*model)(autograd::Variable(x)), y);
      loss.backward();
      opt.step();
      (step == 0 ? first : last) = loss.item();
    }
    const bool changed = model->parameters().front().tensor().toVector<float>() != before;
    std::printf("consumer: trained mlp %d steps, loss %.4f -> %.4f, parameters changed: %s\n", kSteps, first,
                last, changed ? "yes" : "no");
    return last < first && changed ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: error: %s\n", e.what());
    return 1;
  }
}
