#include "lockstep/data/dataset.h"

#include <cstring>

namespace lockstep::data {

void Dataset::checkIndex(int64_t index, const char* who) const {
  LOCKSTEP_ENFORCE(index >= 0 && index < size(), ValueError, who, ": index ", index,
                   " is out of range for a dataset of ", size(), " samples");
}

Batch Dataset::gather(const std::vector<int64_t>& indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return stackExamples(examples, indices);
}

namespace {
// The rows keep the first sample's memory order when it is dense (a channels_last [C, H, W] image
// makes an NHWC batch), so a sample laid out as the batch wants it is one memcpy, not a reorder.
Tensor stackRows(const std::vector<Example>& examples, bool targets, const std::vector<int64_t>& indices) {
  const Tensor& first = targets ? examples[0].target : examples[0].input;
  Shape shape = first.shape(), strides = first.isDense() ? first.strides() : contiguousStrides(first.shape());
  shape.insert(shape.begin(), static_cast<int64_t>(examples.size()));
  strides.insert(strides.begin(), first.numel());
  Tensor out = Tensor::emptyStrided(shape, strides, first.dtype());
  const size_t row_bytes = first.nbytes();
  const Shape row_strides = out.select(0).strides();
  auto* dst = static_cast<char*>(out.dataPtr());
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor& t = targets ? examples[i].target : examples[i].input;
    LOCKSTEP_ENFORCE(t.shape() == first.shape() && t.dtype() == first.dtype(), ValueError,
                     "cannot stack samples into a batch: sample ", indices[i], " has ",
                     targets ? "target " : "input ", t.describe(), " but sample ", indices[0], " has ",
                     first.describe());
    if (row_bytes == 0) continue;
    if (t.isDense() && t.strides() == row_strides) {
      std::memcpy(dst + i * row_bytes, t.dataPtr(), row_bytes);
    } else {
      out.select(static_cast<int64_t>(i)).copyFrom(t);
    }
  }
  return out;
}
}  // namespace

Batch stackExamples(const std::vector<Example>& examples, std::vector<int64_t> indices) {
  LOCKSTEP_ENFORCE(!examples.empty(), ValueError, "cannot stack an empty list of samples into a batch");
  LOCKSTEP_CHECK(examples.size() == indices.size(), examples.size(), " vs ", indices.size());
  Batch b;
  b.input = stackRows(examples, false, indices);
  b.target = stackRows(examples, true, indices);
  b.indices = std::move(indices);
  return b;
}

}  // namespace lockstep::data
