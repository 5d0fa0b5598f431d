#pragma once
// Text corpora for language models: raw text read from a file or a directory, tokenized bytewise and
// split into train and validation streams (nanoGPT's prepare.py: the first 1 - f of the tokens
// train, the last f validate), and the on-disk form `lockstep data tokenize` writes: a directory
// holding train.bin, val.bin (token files, see token_file.h) and meta.json.
//
// The default corpus is the English text of Debian's `fortunes` package (about 2.6 MB in
// /usr/share/games/fortunes), so a language model trains with nothing to download.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/data/datasets/token_file.h"

namespace lockstep::data {

/// Where Debian's `fortunes` package installs its text.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

/// The text of a file, or of a directory's regular files in name order (not recursing, skipping
/// symlinks and fortune's `.dat` index files), joined by newlines. IoError naming the path when it
/// is missing or unreadable, or when a directory holds no text files; for the fortunes directory
/// the message says to install the `fortunes` package.
std::string readTextCorpus(const std::string& path);

struct TokenSplit {
  std::shared_ptr<const TokenFile> train;
  std::shared_ptr<const TokenFile> val;  // null when val_fraction is 0
};

/// Byte tokens of `text`, the last val_fraction of them held out for validation; `source` (the corpus'
/// path) names them in messages. ValueError when val_fraction is outside [0, 1).
TokenSplit splitTokens(const std::string& text, double val_fraction, const std::string& source = "<memory>");

/// What meta.json beside train.bin / val.bin says.
struct TokenDirMeta {
  std::string tokenizer = "byte";
  int64_t vocab_size = 256;
  TokenWidth dtype = TokenWidth::u16;
  int64_t train_tokens = 0, val_tokens = 0;
  std::string source;
};

/// meta.json's text as TokenDirMeta: vocab_size (required, 1 .. 2^32), dtype (uint16 | uint32),
/// tokenizer ("unspecified" when absent: not taken for bytes), token counts, source. IoError naming `path`
/// for anything else: invalid JSON, a field of the wrong type or out of range, a vocabulary that does not fit
/// the dtype. Pure.
TokenDirMeta parseTokenDirMeta(const std::string& text, const std::string& path);

/// Tokenizes `input` (readTextCorpus) into out_dir/train.bin, val.bin (absent when val_fraction is
/// 0) and meta.json, each written atomically. Returns what meta.json records.
TokenDirMeta writeTokenDir(const std::string& input, const std::string& out_dir, double val_fraction);

/// Opens a directory written by writeTokenDir (or nanoGPT's prepare.py plus a meta.json). IoError
/// naming the file when meta.json, train.bin or a listed val.bin is missing or corrupt.
TokenSplit openTokenDir(const std::string& dir, TokenDirMeta* meta = nullptr);

}  // namespace lockstep::data
