#include "lockstep/data/datasets/token_window_dataset.h"

#include <fmt/format.h>

#include "lockstep/util/error.h"

namespace lockstep::data {

TokenWindowDataset::TokenWindowDataset(std::shared_ptr<const TokenFile> tokens, int64_t block_size,
                                       int64_t vocab_size)
    : tokens_(std::move(tokens)), block_size_(block_size), vocab_size_(vocab_size) {
  if (block_size_ < 1) throw ValueError(fmt::format("block_size must be >= 1, got {}", block_size_));
  if (tokens_->size() < block_size_ + 1) {
    throw ValueError(
        fmt::format("token stream {} holds {} tokens, fewer than one window of block_size + 1 = {}: "
                    "use a larger corpus or a smaller block_size",
                    tokens_->name(), tokens_->size(), block_size_ + 1));
  }
  windows_ = (tokens_->size() - 1) / block_size_;
}

void TokenWindowDataset::checkVocabulary(const int64_t* tokens, int64_t n, int64_t start) const {
  if (vocab_size_ <= 0) return;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] >= vocab_size_)
      throw IoError(
          fmt::format("{}: token {} at token offset {} is outside the vocabulary 0..{} (the token "
                      "directory's meta.json vocab_size); the file was written with another "
                      "tokenizer or is corrupt",
                      tokens_->name(), tokens[i], start + i, vocab_size_ - 1));
  }
}

Example TokenWindowDataset::get(int64_t index) const {
  checkIndex(index, "TokenWindowDataset");
  Tensor input = Tensor::empty({block_size_}, DType::i64);
  Tensor target = Tensor::empty({block_size_}, DType::i64);
  tokens_->copyTo(index * block_size_, block_size_, input.data<int64_t>());
  tokens_->copyTo(index * block_size_ + 1, block_size_, target.data<int64_t>());
  checkVocabulary(input.data<int64_t>(), block_size_, index * block_size_);
  checkVocabulary(target.data<int64_t>() + block_size_ - 1, 1, index * block_size_ + block_size_);
  return {input, target};
}

Batch TokenWindowDataset::gather(const std::vector<int64_t>& indices) const {
  const auto b = static_cast<int64_t>(indices.size());
  Tensor input = Tensor::empty({b, block_size_}, DType::i64);
  Tensor target = Tensor::empty({b, block_size_}, DType::i64);
  for (int64_t r = 0; r < b; ++r) {
    checkIndex(indices[r], "TokenWindowDataset");
    int64_t start = indices[r] * block_size_;
    tokens_->copyTo(start, block_size_, input.data<int64_t>() + r * block_size_);
    tokens_->copyTo(start + 1, block_size_, target.data<int64_t>() + r * block_size_);
    checkVocabulary(input.data<int64_t>() + r * block_size_, block_size_, start);
    checkVocabulary(target.data<int64_t>() + r * block_size_ + block_size_ - 1, 1, start + block_size_);
  }
  return {input, target, indices};
}

}  // namespace lockstep::data
