#pragma once
// Embedding (torch.nn.Embedding): a table of num_embeddings rows of embedding_dim; forward looks
// up i64 indices of any shape and returns [..., embedding_dim]. The row padding_idx (when set)
// starts at zero and gets no gradient.
#include <cstdint>
#include <optional>

#include "lockstep/nn/module.h"
#include "lockstep/tensor/generator.h"

namespace lockstep::nn {

struct EmbeddingOptions {
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  std::optional<int64_t> padding_idx{};
  /// Initial values N(0, init_std^2): torch's default is 1; GPT-2 and Llama use 0.02.
  double init_std = 1.0;
  /// Borrowed during construction; nullptr = defaultGenerator().
  Generator* generator = nullptr;
};

class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& options);
  /// indices: an i64 tensor (held by a Variable that needs no gradient).
  Variable forward(const Variable& indices) override;
  std::string extraRepr() const override;

  const Variable& weight() const { return weight_; }
  const EmbeddingOptions& options() const { return options_; }

 private:
  EmbeddingOptions options_;
  Variable weight_;
};

}  // namespace lockstep::nn
