// embedding: a gather forward, a scatter-add backward into the table's gradient.
#include "lockstep/autograd/ops/embedding.h"

#include "lockstep/autograd/function.h"
#include "lockstep/kernels/transformer.h"

namespace lockstep::autograd {

namespace {

class EmbeddingBackward final : public Node {
 public:
  EmbeddingBackward(Tensor indices, int64_t rows, int64_t padding_idx)
      : indices_(std::move(indices)), rows_(rows), padding_idx_(padding_idx) {}
  std::vector<Tensor> apply(const Tensor& g) override {
    return {kernels::embeddingBackward(g, indices_, rows_, padding_idx_)};
  }
  std::string name() const override { return "EmbeddingBackward"; }
  void releaseSaved() override { indices_ = Tensor(); }

 private:
  Tensor indices_;
  int64_t rows_, padding_idx_;
};

}  // namespace

Variable embedding(const Variable& weight, const Tensor& indices, int64_t padding_idx) {
  LOCKSTEP_ENFORCE(weight.dim() == 2, ValueError, "embedding: weight must be [num_embeddings, dim], got ",
                   weight.tensor().describe());
  LOCKSTEP_ENFORCE(padding_idx == -1 || (padding_idx >= 0 && padding_idx < weight.size(0)), ValueError,
                   "embedding: padding_idx ", padding_idx, " is out of range for ", weight.size(0),
                   " embeddings (use -1 for none)");
  // Index tensors are often made on the host (arange, a batch): say so rather than fail in a kernel.
  LOCKSTEP_ENFORCE(indices.device() == weight.tensor().device(), ValueError, "embedding: the indices are on ",
                   deviceName(indices.device()), " but the weight is on ",
                   deviceName(weight.tensor().device()), "; move the indices there first");
  // Autocast: the gather runs in the weight's dtype (torch's embedding is not on a cast list).
  Tensor y = kernels::embeddingForward(weight.tensor(), indices);
  return record<EmbeddingBackward>(y, {&weight}, indices, weight.size(0), padding_idx);
}

}  // namespace lockstep::autograd
