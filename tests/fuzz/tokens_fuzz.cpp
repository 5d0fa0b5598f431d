// libFuzzer target: the token-data readers (data/datasets/text_corpus.h, token_window_dataset.h) on arbitrary
// bytes. The bytes are a meta.json text: parseTokenDirMeta must accept it with a vocabulary that
// fits its dtype or refuse it with an IoError. They are also a uint16 token stream: every window of
// a TokenWindowDataset over it (block 1-8) must hold the stream's tokens at its offset, target
// shifted by one.
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/data/datasets/text_corpus.h"
#include "lockstep/data/datasets/token_window_dataset.h"
#include "lockstep/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  try {
    const data::TokenDirMeta m =
        data::parseTokenDirMeta(std::string(reinterpret_cast<const char*>(data), size), "fuzz/meta.json");
    LOCKSTEP_CHECK(m.vocab_size >= 1, m.vocab_size);
    LOCKSTEP_CHECK(m.dtype == data::TokenWidth::u16 ? m.vocab_size <= 65536
                                                    : m.vocab_size <= (int64_t{1} << 32));
  } catch (const IoError&) {
  }
  if (size < 3) return 0;
  std::vector<uint16_t> tokens((size - 1) / 2);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<uint16_t>(data[1 + 2 * i] | (data[2 + 2 * i] << 8));
  const int64_t block = 1 + data[0] % 8;
  auto stream = data::TokenFile::fromTokens(tokens);
  try {
    data::TokenWindowDataset ds(stream, block);
    std::vector<int64_t> all(static_cast<size_t>(ds.size()));
    for (int64_t i = 0; i < ds.size(); ++i) all[static_cast<size_t>(i)] = ds.size() - 1 - i;
    data::Batch b = ds.gather(all);
    for (int64_t r = 0; r < b.size(); ++r) {
      const int64_t start = all[static_cast<size_t>(r)] * block;
      for (int64_t k = 0; k < block; ++k) {
        LOCKSTEP_CHECK(b.input.data<int64_t>()[r * block + k] == tokens[static_cast<size_t>(start + k)]);
        LOCKSTEP_CHECK(b.target.data<int64_t>()[r * block + k] == tokens[static_cast<size_t>(start + k + 1)]);
      }
    }
  } catch (const ValueError&) {
    LOCKSTEP_CHECK(static_cast<int64_t>(tokens.size()) < block + 1, tokens.size(), " ", block);
  }
  return 0;
}
