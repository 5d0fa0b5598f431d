#pragma once
// Token files in nanoGPT's layout: a flat array of little-endian token ids, uint16 (vocabularies up
// to 65,536, e.g. GPT-2's 50,257 or bytes) or uint32, no header (`np.memmap(path, dtype=np.uint16)`
// reads them). The width is not in the file: it is given (a meta.json beside the files records it).
//
// TokenFile maps a file read-only (mmap), so a corpus larger than memory costs only the pages a
// batch touches, and every DataLoader thread reads it without locks.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lockstep::data {

enum class TokenWidth : uint8_t { u16 = 2, u32 = 4 };

/// "uint16" / "uint32" (numpy's names, as meta.json writes them); ValueError naming others.
TokenWidth tokenWidthFromName(const std::string& name);
const char* tokenWidthName(TokenWidth w);

/// Thread-safety: immutable after construction; at() may run concurrently.
class TokenFile {
 public:
  /// Maps `path`. IoError naming the file when it cannot be opened or mapped, or when its size is
  /// not a multiple of the token width (a truncated or foreign file).
  static std::shared_ptr<const TokenFile> open(const std::string& path, TokenWidth width);
  /// Tokens held in memory (a corpus tokenized on the fly); `name` says where they came from in messages.
  static std::shared_ptr<const TokenFile> fromTokens(std::vector<uint16_t> tokens,
                                                     std::string name = "<memory>");
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t size() const { return count_; }
  int64_t at(int64_t i) const {
    return width_ == TokenWidth::u16 ? static_cast<const uint16_t*>(base_)[i]
                                     : static_cast<const uint32_t*>(base_)[i];
  }
  /// Copies tokens [start, start + n) as int64 into out.
  void copyTo(int64_t start, int64_t n, int64_t* out) const;
  /// The largest token id (one pass; for checking a model's vocabulary).
  int64_t maxToken() const;
  /// The file's path, or "<memory>".
  const std::string& name() const { return name_; }

 private:
  TokenFile() = default;
  std::string name_;
  const void* base_ = nullptr;
  int64_t count_ = 0;
  TokenWidth width_ = TokenWidth::u16;
  size_t mapped_bytes_ = 0;  // 0 when not mmap'ed
  std::vector<uint16_t> owned_;
};

/// Writes tokens as a flat file of `width` atomically (temp file, fsync, rename). ValueError when a
/// token does not fit the width; IoError naming the path on failure.
void writeTokenFile(const std::string& path, const std::vector<uint32_t>& tokens, TokenWidth width);

}  // namespace lockstep::data
