#include "lockstep/data/datasets/text_corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "lockstep/data/byte_tokenizer.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "lockstep/util/json.h"

namespace lockstep::data {

namespace fs = std::filesystem;

std::string readTextCorpus(const std::string& path) {
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    std::string hint = fs::path(path).lexically_normal() == fs::path(kFortunesDir)
                           ? " (install Debian's `fortunes` package: apt-get install fortunes)"
                           : "";
    throw IoError(fmt::format("text corpus {} does not exist{}", path, hint));
  }
  if (!fs::is_directory(status)) return file::readAll(path);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (entry.is_symlink() || !entry.is_regular_file()) continue;
    if (entry.path().extension() == ".dat") continue;
    files.push_back(entry.path());
  }
  if (ec) throw IoError(fmt::format("cannot list text corpus directory {}: {}", path, ec.message()));
  if (files.empty()) throw IoError(fmt::format("text corpus directory {} holds no text files", path));
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    text += file::readAll(f.string());
    if (!text.empty() && text.back() != '\n') text += '\n';
  }
  return text;
}

namespace {
void checkFraction(double val_fraction) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    throw ValueError(fmt::format("val_fraction must be in [0, 1), got {}", val_fraction));
  }
}
int64_t trainCount(size_t n, double val_fraction) {
  return static_cast<int64_t>(static_cast<double>(n) * (1.0 - val_fraction));
}
}  // namespace

TokenSplit splitTokens(const std::string& text, double val_fraction, const std::string& source) {
  checkFraction(val_fraction);
  std::vector<uint16_t> all = ByteTokenizer::encode(text);
  const int64_t n_train = trainCount(all.size(), val_fraction);
  TokenSplit split;
  if (val_fraction > 0.0)
    split.val = TokenFile::fromTokens(std::vector<uint16_t>(all.begin() + n_train, all.end()),
                                      source + " (its validation part)");
  all.resize(static_cast<size_t>(n_train));
  split.train =
      TokenFile::fromTokens(std::move(all), source + (val_fraction > 0.0 ? " (its training part)" : ""));
  return split;
}

TokenDirMeta writeTokenDir(const std::string& input, const std::string& out_dir, double val_fraction) {
  checkFraction(val_fraction);
  const std::string text = readTextCorpus(input);
  std::vector<uint16_t> all = ByteTokenizer::encode(text);
  const int64_t n_train = trainCount(all.size(), val_fraction);
  // A corpus that leaves nothing to train on (empty, or all of it held out) is refused before any
  // file is written: train.bin of 0 tokens would fail only at the first training run.
  if (n_train == 0)
    throw ValueError(
        fmt::format("{}: {} bytes leave no training tokens with --val-fraction {}; give a larger "
                    "text or a smaller --val-fraction",
                    input, all.size(), val_fraction));
  file::makeDirs(out_dir);
  std::vector<uint32_t> train(all.begin(), all.begin() + n_train), val(all.begin() + n_train, all.end());
  writeTokenFile(out_dir + "/train.bin", train, TokenWidth::u16);
  if (val_fraction > 0.0) {
    writeTokenFile(out_dir + "/val.bin", val, TokenWidth::u16);
  } else {
    // An earlier tokenize's val.bin would be read as this corpus' validation tokens.
    std::error_code ec;
    std::filesystem::remove(out_dir + "/val.bin", ec);
    if (ec) throw IoError(fmt::format("cannot remove the old {}/val.bin: {}", out_dir, ec.message()));
  }
  TokenDirMeta meta;
  meta.train_tokens = static_cast<int64_t>(train.size());
  meta.val_tokens = val_fraction > 0.0 ? static_cast<int64_t>(val.size()) : 0;
  meta.source = input;
  nlohmann::json j = {{"tokenizer", meta.tokenizer},         {"vocab_size", meta.vocab_size},
                      {"dtype", tokenWidthName(meta.dtype)}, {"train_tokens", meta.train_tokens},
                      {"val_tokens", meta.val_tokens},       {"source", meta.source}};
  // (a source path that is not UTF-8 is written with U+FFFD in place of its bad bytes)
  file::writeAtomic(out_dir + "/meta.json",
                    j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  return meta;
}

namespace {
// An integer field, or fallback when absent. JSON numbers that are not integers, or integers past
// int64, are errors: nlohmann's get<int64_t>() of 1e65 is undefined behaviour (found by fuzz_tokens).
int64_t intField(const nlohmann::json& j, const char* key, std::optional<int64_t> fallback,
                 const std::string& path) {
  if (!j.contains(key)) {
    if (fallback) return *fallback;
    throw IoError(fmt::format("{}: {} is missing", path, key));
  }
  const nlohmann::json& v = j.at(key);
  if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  throw IoError(fmt::format("{}: {} must be an integer, got {}", path, key, v.dump()));
}
}  // namespace

TokenDirMeta parseTokenDirMeta(const std::string& text, const std::string& path) {
  TokenDirMeta meta;
  try {
    auto j = json::parse(text);
    if (!j.is_object()) throw IoError(path + " is not a JSON object");
    // lockstep data tokenize always names its tokenizer: a meta.json without one was written by hand
    // for another tokenizer's ids, which are not bytes.
    meta.tokenizer = j.value("tokenizer", std::string("unspecified"));
    meta.vocab_size = intField(j, "vocab_size", std::nullopt, path);
    meta.dtype = tokenWidthFromName(j.value("dtype", std::string("uint16")));
    meta.train_tokens = intField(j, "train_tokens", 0, path);
    meta.val_tokens = intField(j, "val_tokens", 0, path);
    meta.source = j.value("source", std::string());
  } catch (const nlohmann::json::exception& e) {
    throw IoError(fmt::format("{} is not a valid token meta file: {}", path, e.what()));
  } catch (const ValueError& e) {
    throw IoError(fmt::format("{}: {}", path, e.what()));
  }
  const int64_t limit = meta.dtype == TokenWidth::u16 ? int64_t{1} << 16 : int64_t{1} << 32;
  if (meta.vocab_size < 1 || meta.vocab_size > limit) {
    throw IoError(fmt::format("{}: vocab_size {} does not fit dtype {} (1 .. {})", path, meta.vocab_size,
                              tokenWidthName(meta.dtype), limit));
  }
  if (meta.train_tokens < 0 || meta.val_tokens < 0)
    throw IoError(fmt::format("{}: negative token counts", path));
  return meta;
}

TokenSplit openTokenDir(const std::string& dir, TokenDirMeta* meta_out) {
  const std::string meta_path = dir + "/meta.json";
  if (!file::exists(meta_path)) {
    throw IoError(fmt::format(
        "{} is missing: make the token directory with `lockstep data tokenize TEXT -o {}`, or, for "
        "train.bin and val.bin of another tokenizer (nanoGPT's prepare.py: uint16 ids), write "
        "{{\"vocab_size\": N, \"tokenizer\": \"NAME\"}} there (N: one past the largest id; nanoGPT's "
        "meta.pkl "
        "is not read)",
        meta_path, dir));
  }
  TokenDirMeta meta = parseTokenDirMeta(file::readAll(meta_path), meta_path);
  TokenSplit split;
  split.train = TokenFile::open(dir + "/train.bin", meta.dtype);
  if (file::exists(dir + "/val.bin")) split.val = TokenFile::open(dir + "/val.bin", meta.dtype);
  // The counts `lockstep data tokenize` records (train_tokens > 0) must be the files': a file from
  // another tokenize (a stale val.bin) or one cut short would be trained or measured on silently.
  if (meta.train_tokens > 0) {
    const int64_t val = split.val ? split.val->size() : 0;
    if (split.train->size() != meta.train_tokens || val != meta.val_tokens)
      throw IoError(
          fmt::format("{}: records {} training and {} validation tokens, but train.bin holds {} "
                      "and val.bin {}: the files are not the ones it was written with; tokenize "
                      "the text again",
                      meta_path, meta.train_tokens, meta.val_tokens, split.train->size(),
                      split.val ? std::to_string(val) : std::string("is missing")));
  }
  if (meta_out) *meta_out = meta;
  return split;
}

}  // namespace lockstep::data
