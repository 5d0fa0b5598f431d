#include "lockstep/data/byte_tokenizer.h"

#include <fmt/format.h>

#include "lockstep/util/error.h"

namespace lockstep::data {

std::vector<uint16_t> ByteTokenizer::encode(std::string_view text) {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= kVocabSize) {
      throw ValueError(
          fmt::format("ByteTokenizer::decode: token {} at position {} is outside 0..255 (a model "
                      "with vocab_size > 256 was not trained on byte tokens)",
                      tokens[i], i));
    }
    out[i] = static_cast<char>(tokens[i]);
  }
  return out;
}

std::string ByteTokenizer::decodeForDisplay(const std::vector<int64_t>& tokens) {
  std::string bytes(tokens.size(), '\0');
  // 0xFF never occurs in UTF-8, so toPrintableUtf8 replaces it.
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t t = tokens[i];
    const bool control = (t < 0x20 && t != '\n' && t != '\t') || t == 0x7F;
    bytes[i] = static_cast<char>(t >= 0 && t < kVocabSize && !control ? t : 0xFF);
  }
  return toPrintableUtf8(bytes);
}

namespace {
// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF).
size_t validSequenceLength(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  }
  if (c == 0xE0 && b(i + 1) < 0xA0) return 0;  // overlong
  if (c == 0xED && b(i + 1) > 0x9F) return 0;  // surrogates
  if (c == 0xF0 && b(i + 1) < 0x90) return 0;  // overlong
  if (c == 0xF4 && b(i + 1) > 0x8F) return 0;  // above U+10FFFF
  return n;
}
}  // namespace

std::string toPrintableUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    size_t n = validSequenceLength(bytes, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace lockstep::data
