#pragma once
// TokenWindowDataset: next-token prediction samples from a token stream. Sample i is the window of
// block_size + 1 tokens starting at i * block_size: input = its first block_size tokens, target =
// its last block_size (the input shifted by one). Windows tile the stream, so a sampler that
// shuffles indices draws random windows, and a DistributedSampler's shards never overlap: each
// token position is trained on by exactly one rank per epoch. (nanoGPT draws window starts
// uniformly at random instead; tiles give the same coverage with no overlap between ranks.)
#include <memory>

#include "lockstep/data/dataset.h"
#include "lockstep/data/datasets/token_file.h"

namespace lockstep::data {

/// Thread-safety: immutable; get() and gather() may run concurrently.
class TokenWindowDataset : public Dataset {
 public:
  /// ValueError when block_size < 1 or the stream holds fewer than block_size + 1 tokens (it names
  /// the stream and both counts).
  /// vocab_size > 0: every window read is checked against it (IoError naming the file and the
  /// token's offset in it; checked as read, not by a scan of a many-gigabyte file at start).
  TokenWindowDataset(std::shared_ptr<const TokenFile> tokens, int64_t block_size, int64_t vocab_size = 0);

  /// (tokens - 1) / block_size windows.
  int64_t size() const override { return windows_; }
  /// input and target: i64 [block_size].
  Example get(int64_t index) const override;
  /// input and target: i64 [B, block_size], copied straight from the stream.
  Batch gather(const std::vector<int64_t>& indices) const override;

  int64_t blockSize() const { return block_size_; }
  const TokenFile& tokens() const { return *tokens_; }

 private:
  std::shared_ptr<const TokenFile> tokens_;
  int64_t block_size_;
  int64_t vocab_size_;
  int64_t windows_;
  /// IoError for the first of tokens[0, n) (read from the stream at `start`) past the vocabulary.
  void checkVocabulary(const int64_t* tokens, int64_t n, int64_t start) const;
};

}  // namespace lockstep::data
