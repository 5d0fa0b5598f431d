// Text data for language models: the byte tokenizer, nanoGPT-layout token files, token windows and
// their sharding across ranks, tokenized corpus directories, and Debian's fortunes corpus.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "lockstep/data.h"
#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

namespace fs = std::filesystem;

std::string tempDir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("lockstep_text_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

TEST(ByteTokenizer, round_trips_every_byte_and_utf8_text) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  all += "naïve café — 日本語 🙂";
  auto tokens = ByteTokenizer::encode(all);
  ASSERT_EQ(tokens.size(), all.size());
  EXPECT_EQ(tokens[65], 65);
  EXPECT_EQ(tokens[255], 255);
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  EXPECT_EQ(ByteTokenizer::decode(ids), all);
}

TEST(ByteTokenizer, display_replaces_control_bytes_and_ids_past_the_bytes) {
  EXPECT_EQ(ByteTokenizer::decodeForDisplay({'a', '\n', '\t', 'b'}), "a\n\tb");
  EXPECT_EQ(ByteTokenizer::decodeForDisplay({0x1B, '[', '2', 'J'}), "\xEF\xBF\xBD[2J")
      << "ESC must not reach the terminal";
  EXPECT_EQ(ByteTokenizer::decodeForDisplay({'x', 300}), "x\xEF\xBF\xBD");
}

TEST(ByteTokenizer, decode_rejects_ids_outside_the_byte_range) {
  EXPECT_THROW(ByteTokenizer::decode({104, 256}), ValueError);
  EXPECT_THROW(ByteTokenizer::decode({-1}), ValueError);
}

TEST(ByteTokenizer, printable_utf8_replaces_only_broken_sequences) {
  EXPECT_EQ(toPrintableUtf8("café 🙂"), "café 🙂");
  std::string cut = std::string("caf") + "\xC3";  // first byte of é only
  EXPECT_EQ(toPrintableUtf8(cut), "caf\xEF\xBF\xBD");
  EXPECT_EQ(toPrintableUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong '/'
  EXPECT_EQ(toPrintableUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
}

TEST(TokenFile, writes_and_maps_uint16_and_uint32_little_endian) {
  std::string dir = tempDir("file");
  writeTokenFile(dir + "/a.bin", {1, 2, 65535, 7}, TokenWidth::u16);
  writeTokenFile(dir + "/b.bin", {1, 70000, 4000000000u}, TokenWidth::u32);
  EXPECT_EQ(fs::file_size(dir + "/a.bin"), 8u);
  auto a = TokenFile::open(dir + "/a.bin", TokenWidth::u16);
  ASSERT_EQ(a->size(), 4);
  EXPECT_EQ(a->at(2), 65535);
  EXPECT_EQ(a->maxToken(), 65535);
  std::ifstream raw(dir + "/a.bin", std::ios::binary);
  unsigned char bytes[4];
  raw.read(reinterpret_cast<char*>(bytes), 4);
  EXPECT_EQ(bytes[0], 1);  // little-endian, no header: numpy's memmap(dtype=uint16) layout
  EXPECT_EQ(bytes[1], 0);
  auto b = TokenFile::open(dir + "/b.bin", TokenWidth::u32);
  EXPECT_EQ(b->at(1), 70000);
  EXPECT_EQ(b->at(2), 4000000000LL);
  EXPECT_THROW(writeTokenFile(dir + "/c.bin", {70000}, TokenWidth::u16), ValueError);
  fs::remove_all(dir);
}

TEST(TokenFile, rejects_missing_truncated_and_empty_files) {
  std::string dir = tempDir("bad");
  EXPECT_THROW(TokenFile::open(dir + "/none.bin", TokenWidth::u16), IoError);
  std::ofstream(dir + "/odd.bin", std::ios::binary) << "abc";
  try {
    TokenFile::open(dir + "/odd.bin", TokenWidth::u16);
    FAIL() << "a 3-byte uint16 file opened";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("odd.bin"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/empty.bin", std::ios::binary).flush();
  EXPECT_THROW(TokenFile::open(dir + "/empty.bin", TokenWidth::u16), IoError);
  EXPECT_THROW(tokenWidthFromName("int8"), ValueError);
  fs::remove_all(dir);
}

TEST(TokenWindowDataset, windows_tile_the_stream_with_targets_shifted_by_one) {
  std::vector<uint16_t> tokens(23);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(100 + i);
  TokenWindowDataset ds(TokenFile::fromTokens(tokens), 5);
  EXPECT_EQ(ds.size(), 4);  // (23 - 1) / 5
  Example e = ds.get(2);
  ASSERT_EQ(e.input.shape(), (Shape{5}));
  for (int64_t k = 0; k < 5; ++k) {
    EXPECT_EQ(e.input.data<int64_t>()[k], 110 + k);
    EXPECT_EQ(e.target.data<int64_t>()[k], 111 + k);
  }
  Batch b = ds.gather({3, 0});
  ASSERT_EQ(b.input.shape(), (Shape{2, 5}));
  EXPECT_EQ(b.input.data<int64_t>()[0], 115);
  EXPECT_EQ(b.target.data<int64_t>()[4], 120);  // the last window's last target
  EXPECT_EQ(b.input.data<int64_t>()[5], 100);
  EXPECT_THROW(ds.get(4), ValueError);
  EXPECT_EQ(TokenWindowDataset(TokenFile::fromTokens(tokens), 22).size(), 1);
  EXPECT_THROW(TokenWindowDataset(TokenFile::fromTokens(tokens), 23), ValueError);  // needs 24
  EXPECT_THROW(TokenWindowDataset(TokenFile::fromTokens(tokens), 0), ValueError);
}

TEST(TokenWindowDataset, ranks_train_disjoint_windows_covering_the_stream) {
  std::vector<uint16_t> tokens(3 * 64 * 4 + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i % 60000);
  auto ds = std::make_shared<TokenWindowDataset>(TokenFile::fromTokens(tokens), 4);
  ASSERT_EQ(ds->size(), 192);
  std::set<int64_t> starts;
  int64_t seen = 0;
  for (int64_t r = 0; r < 3; ++r) {
    DistributedSampler s(ds->size(), {.num_replicas = 3, .rank = r, .shuffle = true, .seed = 7});
    Batch b = ds->gather(s.epochIndices(1));
    for (int64_t row = 0; row < b.size(); ++row) starts.insert(b.input.data<int64_t>()[row * 4]);
    seen += b.size();
  }
  EXPECT_EQ(seen, 192);
  EXPECT_EQ(starts.size(), 192u) << "two ranks trained on the same window";
}

TEST(TextCorpus, tokenize_directory_round_trips_through_open) {
  std::string dir = tempDir("corpus");
  fs::create_directories(dir + "/text");
  std::ofstream(dir + "/text/b") << "second file\n%\nmore";
  std::ofstream(dir + "/text/a") << "first file\n";
  std::ofstream(dir + "/text/a.dat") << "binary index, skipped";
  fs::create_symlink("a", dir + "/text/a.u8");  // fortune's duplicate links, skipped
  std::string text = readTextCorpus(dir + "/text");
  EXPECT_EQ(text, "first file\nsecond file\n%\nmore\n");
  TokenDirMeta meta = writeTokenDir(dir + "/text", dir + "/tok", 0.25);
  EXPECT_EQ(meta.train_tokens + meta.val_tokens, static_cast<int64_t>(text.size()));
  TokenDirMeta read;
  TokenSplit split = openTokenDir(dir + "/tok", &read);
  EXPECT_EQ(read.vocab_size, 256);
  EXPECT_EQ(read.train_tokens, meta.train_tokens);
  ASSERT_TRUE(split.val);
  std::string round;
  for (int64_t i = 0; i < split.train->size(); ++i) round.push_back(static_cast<char>(split.train->at(i)));
  for (int64_t i = 0; i < split.val->size(); ++i) round.push_back(static_cast<char>(split.val->at(i)));
  EXPECT_EQ(round, text);
  EXPECT_THROW(openTokenDir(dir + "/text"), IoError);  // no meta.json
  EXPECT_THROW(readTextCorpus(dir + "/none"), IoError);
  EXPECT_THROW(splitTokens(text, 1.0), ValueError);
  fs::remove_all(dir);
}

// Tokenizing again into the same directory without validation tokens left the old val.bin, which
// training then measured on; meta.json's counts now have to be the files'.
TEST(TextCorpus, a_stale_or_cut_token_file_is_refused_by_its_counts) {
  std::string dir = tempDir("stale");
  std::ofstream(dir + "/one.txt") << std::string(400, 'x');
  std::ofstream(dir + "/two.txt") << std::string(300, 'y');
  writeTokenDir(dir + "/one.txt", dir + "/tok", 0.25);
  ASSERT_TRUE(fs::exists(dir + "/tok/val.bin"));
  TokenDirMeta meta = writeTokenDir(dir + "/two.txt", dir + "/tok", 0.0);
  EXPECT_EQ(meta.val_tokens, 0);
  EXPECT_FALSE(fs::exists(dir + "/tok/val.bin"));
  TokenSplit split = openTokenDir(dir + "/tok");
  EXPECT_FALSE(split.val);
  EXPECT_EQ(split.train->size(), 300);
  // A val.bin put back beside it (or a train.bin cut short): the counts say so.
  writeTokenFile(dir + "/tok/val.bin", std::vector<uint32_t>(50, 'z'), TokenWidth::u16);
  try {
    openTokenDir(dir + "/tok");
    FAIL() << "a stale val.bin was taken";
  } catch (const IoError& e) {
    EXPECT_NE(
        std::string(e.what()).find("records 300 training and 0 validation tokens, but train.bin holds 300 "
                                   "and val.bin 50"),
        std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// A token past meta.json's vocabulary is named with its file and offset when its window is read
// (it failed in the model's embedding, at a position within the batch).
TEST(TextCorpus, a_token_past_the_vocabulary_names_its_file_and_offset) {
  std::vector<uint16_t> tokens(41, 7);
  tokens[22] = 300;
  auto stream = TokenFile::fromTokens(tokens, "d/train.bin");
  TokenWindowDataset ds(stream, 4, 256);
  EXPECT_NO_THROW(ds.gather({0, 1, 2, 3, 4}));  // tokens 0..20
  try {
    ds.gather({0, 5});
    FAIL() << "token 300 was read";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "d/train.bin: token 300 at token offset 22 is outside the vocabulary 0..255"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ds.get(5), IoError);
  EXPECT_NO_THROW(TokenWindowDataset(stream, 4).gather({5}));  // unchecked without a vocabulary
}

TEST(TextCorpus, fortunes_package_gives_megabytes_of_english_text) {
  if (!fs::exists(kFortunesDir)) GTEST_SKIP() << "Debian's fortunes package is not installed";
  std::string text = readTextCorpus(kFortunesDir);
  EXPECT_GT(text.size(), 1'000'000u);
  EXPECT_NE(text.find("the"), std::string::npos);
  TokenSplit split = splitTokens(text, 0.1);
  EXPECT_NEAR(static_cast<double>(split.val->size()) / static_cast<double>(text.size()), 0.1, 1e-3);
}

}  // namespace
}  // namespace lockstep::data

namespace lockstep::data {
namespace {
TEST(TextCorpus, meta_json_errors_name_the_file) {
  TokenDirMeta m = parseTokenDirMeta(R"({"vocab_size": 50257, "dtype": "uint32"})", "d/meta.json");
  EXPECT_EQ(m.vocab_size, 50257);
  EXPECT_EQ(m.dtype, TokenWidth::u32);
  EXPECT_EQ(m.tokenizer, "unspecified");  // written by hand for another tokenizer: not bytes
  EXPECT_EQ(parseTokenDirMeta(R"({"vocab_size": 256, "tokenizer": "byte"})", "d/meta.json").tokenizer,
            "byte");
  for (const char* bad :
       {R"({"vocab_size": 70000, "dtype": "uint16"})", R"({"dtype": "uint16"})", R"({"vocab_size": "256"})",
        R"([256])", "{", R"({"vocab_size": 0})", R"({"vocab_size": 256, "dtype": "int8"})"}) {
    try {
      parseTokenDirMeta(bad, "d/meta.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("d/meta.json"), std::string::npos) << e.what();
    }
  }
}
}  // namespace
}  // namespace lockstep::data
