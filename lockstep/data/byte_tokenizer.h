#pragma once
// ByteTokenizer: the tokenizer that needs no download. Every byte of the UTF-8 text is one token
// (ids 0..255), so any text round-trips exactly and the vocabulary is 256 (GPT-2's byte-level BPE
// starts from the same alphabet, before merges). Models sized for it use vocab_size 256.
//
// Thread-safety: stateless; every function may run concurrently.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::data {

struct ByteTokenizer {
  static constexpr int64_t kVocabSize = 256;
  /// One token per byte.
  static std::vector<uint16_t> encode(std::string_view text);
  /// The bytes back; ValueError naming the position of a token id outside 0..255.
  static std::string decode(const std::vector<int64_t>& tokens);
  /// For printing what a model generated: ids outside 0..255 (a model with a larger vocabulary),
  /// broken UTF-8 sequences and control characters other than newline and tab (ESC sequences could
  /// drive the terminal) become U+FFFD.
  static std::string decodeForDisplay(const std::vector<int64_t>& tokens);
};

/// The text with every invalid UTF-8 sequence replaced by U+FFFD, for printing sampled bytes (a
/// model may emit half of a multi-byte character). Valid text is returned unchanged. Pure.
std::string toPrintableUtf8(std::string_view bytes);

}  // namespace lockstep::data
