#include "lockstep/nn/embedding.h"

#include "lockstep/autograd/ops/embedding.h"
#include "lockstep/nn/init.h"

namespace lockstep::nn {

Embedding::Embedding(const EmbeddingOptions& options) : Module("Embedding"), options_(options) {
  LOCKSTEP_ENFORCE(options.num_embeddings > 0 && options.embedding_dim > 0, ValueError,
                   "Embedding: num_embeddings and embedding_dim must be positive, got ",
                   options.num_embeddings, " and ", options.embedding_dim);
  if (options.padding_idx) {
    LOCKSTEP_ENFORCE(*options.padding_idx >= 0 && *options.padding_idx < options.num_embeddings, ValueError,
                     "Embedding: padding_idx ", *options.padding_idx, " is outside 0..",
                     options.num_embeddings - 1);
  }
  Tensor w = Tensor::empty({options.num_embeddings, options.embedding_dim});
  init::normal(w, 0.0, options.init_std, options.generator ? *options.generator : defaultGenerator());
  if (options.padding_idx) w.narrow(0, *options.padding_idx, 1).zero();
  weight_ = registerParameter("weight", w);
}

Variable Embedding::forward(const Variable& indices) {
  return autograd::embedding(weight_, indices.tensor(), options_.padding_idx.value_or(-1));
}

std::string Embedding::extraRepr() const {
  std::string s = detail::concat(options_.num_embeddings, ", ", options_.embedding_dim);
  if (options_.padding_idx) s += detail::concat(", padding_idx=", *options_.padding_idx);
  return s;
}

}  // namespace lockstep::nn
