// A tiny GPT and a tiny Llama memorise a short text with AdamW, and greedy generation then recites it.
#include <gtest/gtest.h>

#include "lockstep/autograd.h"
#include "lockstep/nn.h"
#include "lockstep/optim.h"

using namespace lockstep;
using namespace lockstep::nn;

namespace {
std::shared_ptr<LanguageModel> makeLm(const std::string& name, ModelOptions o) {
  return std::dynamic_pointer_cast<LanguageModel>(makeModel(name, o));
}
}  // namespace

TEST(LanguageModel, tiny_gpt_and_llama_overfit_a_short_text) {
  const std::string text = "to be or not to be, that is the question. ";
  std::vector<int64_t> ids(text.begin(), text.end());
  const int64_t t = static_cast<int64_t>(ids.size()) - 1;
  Tensor x = Tensor::fromVector(std::vector<int64_t>(ids.begin(), ids.end() - 1), {1, t});
  Tensor y = Tensor::fromVector(std::vector<int64_t>(ids.begin() + 1, ids.end()), {t});
  for (const char* name : {"gpt", "llama"}) {
    Generator g(5);
    ModelOptions o;
    o.vocab_size = 128;
    o.block_size = 64;
    o.n_layer = 2;
    o.n_head = 2;
    o.n_embd = 32;
    o.dropout = 0.0;
    o.generator = &g;
    auto m = makeLm(name, o);
    auto opt = optim::makeOptimizer({"AdamW", {{"lr", 1e-2}, {"weight_decay", 0.0}}}, m->parameters());
    double loss = 0;
    for (int step = 0; step < 150; ++step) {
      opt->zeroGrad();
      Variable l = autograd::crossEntropy(autograd::reshape(m->forward(Variable(x)), {t, 128}), y);
      l.backward();
      opt->step();
      loss = l.item();
    }
    EXPECT_LT(loss, 0.05) << name << " did not memorise the text";
    // Greedy generation then recites it.
    std::vector<int64_t> prompt(ids.begin(), ids.begin() + 6);
    GenerateOptions go;
    go.max_new_tokens = 20;
    go.temperature = 0;
    std::vector<int64_t> out = generate(*m, prompt, go);
    EXPECT_EQ(std::string(out.begin(), out.end()), text.substr(0, 26)) << name;
  }
}
