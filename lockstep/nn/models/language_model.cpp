#include "lockstep/nn/models/language_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "lockstep/autograd/checkpoint.h"
#include "lockstep/autograd/ops/shape.h"
#include "lockstep/kernels/graph_capture.h"
#include "lockstep/nn/linear.h"
#include "lockstep/util/error.h"

namespace lockstep::nn {

Variable LanguageModel::forwardLoss(const Variable& idx, const Tensor& target,
                                    const autograd::CrossEntropyOptions& opts) {
  const Tensor flat = flatTargets(target, idx, typeName().c_str());
  Variable logits = forward(idx);
  return autograd::crossEntropy(autograd::reshape(logits, {flat.size(0), logits.size(-1)}), flat, opts);
}

Tensor flatTargets(const Tensor& target, const Variable& idx, const char* model) {
  LOCKSTEP_ENFORCE(target.defined() && target.dtype() == DType::i64 && target.shape() == idx.shape(),
                   ValueError, model, ": the targets must be i64 token ids of the input's shape ",
                   shapeToString(idx.shape()), ", got ",
                   target.defined() ? target.describe() : std::string("an undefined tensor"));
  return target.reshape({target.numel()});
}

void checkTokenInput(const Tensor& idx, int64_t vocab_size, int64_t block_size, const char* model,
                     const Device& device) {
  LOCKSTEP_ENFORCE(idx.defined() && idx.dtype() == DType::i64 && idx.dim() == 2, ValueError, model,
                   ": expects token ids as an i64 tensor [batch, time], got ",
                   idx.defined() ? std::string(dtypeName(idx.dtype())) + " " + shapeToString(idx.shape())
                                 : std::string("an undefined tensor"));
  const int64_t t = idx.size(1);
  LOCKSTEP_ENFORCE(t >= 1 && t <= block_size, ValueError, model, ": sequence length ", t,
                   " is outside 1..block_size (", block_size,
                   "); crop the context or build the model with a larger ", "block_size");
  LOCKSTEP_ENFORCE(idx.device() == device, ValueError, model, ": the token ids are on ",
                   deviceName(idx.device()), " but the model is on ", deviceName(device),
                   "; move them there first (idx.to(", deviceName(device), "))");
  // A step being captured into a CUDA graph must not wait for the GPU: the embedding's own check on
  // the device stands in then (a bad id's row is NaN; the eager warmup steps before a capture
  // checked here as ever).
  if (kernels::isCapturingGraph(idx.device())) return;
  Tensor c = idx.to(Device::cpu()).contiguous();  // on the host: a copy of ids on a GPU
  const int64_t* p = c.data<int64_t>();
  for (int64_t i = 0; i < c.numel(); ++i) {
    LOCKSTEP_ENFORCE(p[i] >= 0 && p[i] < vocab_size, ValueError, model, ": token id ", p[i], " at position ",
                     i, " is outside the vocabulary 0..", vocab_size - 1,
                     " (the data's tokenizer has a larger vocabulary than the model's vocab_size)");
  }
}

Variable runBlocks(const std::vector<Module*>& blocks, Variable x, int64_t checkpoint_every) {
  if (checkpoint_every <= 0) {
    for (Module* b : blocks) x = (*b)(x);
    return x;
  }
  const size_t every = static_cast<size_t>(checkpoint_every);
  for (size_t first = 0; first < blocks.size(); first += every) {
    const size_t last = std::min(blocks.size(), first + every);
    // The last segment runs plainly, as torch.utils.checkpoint.checkpoint_sequential runs its last:
    // its backward comes right after the loss, so recomputing it would cost a forward and free
    // nothing for long.
    if (last == blocks.size()) {
      for (size_t i = first; i < last; ++i) x = (*blocks[i])(x);
      break;
    }
    // The segment runs again in backward, after this function returned: it owns its block list.
    std::vector<Module*> segment(blocks.begin() + static_cast<std::ptrdiff_t>(first),
                                 blocks.begin() + static_cast<std::ptrdiff_t>(last));
    x = autograd::checkpoint(
        [segment](const std::vector<Variable>& in) {
          Variable h = in[0];
          for (Module* b : segment) h = (*b)(h);
          return h;
        },
        {x});
  }
  return x;
}

WeightDecayGroups weightDecayGroups(Module& model) {
  std::set<const autograd::VariableImpl*> decayed;
  for (auto& [name, m] : model.namedModules()) {
    if (auto* linear = dynamic_cast<Linear*>(m)) decayed.insert(linear->weight().impl().get());
  }
  WeightDecayGroups g;
  for (const Variable& p : model.parameters())
    (decayed.count(p.impl().get()) ? g.decay : g.no_decay).push_back(p);
  return g;
}

std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options) {
  const bool was_training = model.isTraining();
  model.eval();
  const Device device = model.device();
  std::vector<int64_t> tokens;
  try {
    tokens = generateWith(
        prompt, model.vocabSize(), model.blockSize(), options, [&](const std::vector<int64_t>& ctx) {
          const auto t = static_cast<int64_t>(ctx.size());
          Tensor logits = model.forward(Variable(Tensor::fromVector(ctx, {1, t}).to(device))).tensor();
          // Only the last position's row is sampled from: only it comes to the host.
          return logits.select(0).select(t - 1).to(Device::cpu()).to(DType::f32).contiguous();
        });
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  return tokens;
}

std::vector<int64_t> generateWith(const std::vector<int64_t>& prompt, int64_t vocab, int64_t block_size,
                                  const GenerateOptions& options,
                                  const std::function<Tensor(const std::vector<int64_t>&)>& last_logits,
                                  const std::function<int64_t(int64_t)>& agree) {
  LOCKSTEP_ENFORCE(!prompt.empty(), ValueError, "generate: the prompt is empty (give at least one token)");
  LOCKSTEP_ENFORCE(options.temperature >= 0, ValueError, "generate: temperature must be >= 0, got ",
                   options.temperature);
  for (size_t i = 0; i < prompt.size(); ++i) {
    LOCKSTEP_ENFORCE(prompt[i] >= 0 && prompt[i] < vocab, ValueError, "generate: prompt token ", prompt[i],
                     " at position ", i, " is outside the model's vocabulary of ", vocab);
  }
  Generator& gen = options.generator ? *options.generator : defaultGenerator();
  autograd::NoGradGuard no_grad;
  std::vector<int64_t> tokens = prompt;
  std::vector<double> probs(static_cast<size_t>(vocab));
  for (int64_t n = 0; n < options.max_new_tokens; ++n) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(tokens.size()), block_size);
    const Tensor row = last_logits(std::vector<int64_t>(tokens.end() - t, tokens.end()));
    int64_t next = -1;
    if (row.defined()) {
      const float* last = row.data<float>();
      // A NaN or an infinity would pick a token by accident (max_element, an empty distribution):
      // the weights are not finite (a run that diverged, a damaged file).
      for (int64_t v = 0; v < vocab; ++v)
        LOCKSTEP_ENFORCE(std::isfinite(last[v]), ValueError, "generate: the model's logit of token ", v,
                         " is ", last[v], " at generated token ", n,
                         ": its weights are not finite (a run that diverged, or a damaged weights file)");
      next = 0;
      if (options.temperature == 0) {
        next = std::max_element(last, last + vocab) - last;
      } else {
        double limit = -INFINITY;
        if (options.top_k > 0 && options.top_k < vocab) {
          std::vector<float> sorted(last, last + vocab);
          std::nth_element(sorted.begin(), sorted.begin() + (options.top_k - 1), sorted.end(),
                           std::greater<>());
          limit = sorted[static_cast<size_t>(options.top_k - 1)];
        }
        const double mx = *std::max_element(last, last + vocab);
        double total = 0;
        for (int64_t v = 0; v < vocab; ++v) {
          probs[v] = last[v] < limit ? 0.0 : std::exp((last[v] - mx) / options.temperature);
          total += probs[v];
        }
        double u = gen.nextDouble() * total, acc = 0;
        next = vocab - 1;
        for (int64_t v = 0; v < vocab; ++v) {
          acc += probs[v];
          if (u < acc && probs[v] > 0) {
            next = v;
            break;
          }
        }
      }
    }
    if (agree) next = agree(next);
    LOCKSTEP_CHECK(next >= 0 && next < vocab, "generate: no token agreed (", next, ")");
    tokens.push_back(next);
  }
  return tokens;
}

}  // namespace lockstep::nn
