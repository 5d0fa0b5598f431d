// IDX reader and loadMnist: the real Fashion-MNIST files, tiny generated files (gzip and raw) and
// every kind of damage a download can suffer.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <tuple>

#include "data/data_test_util.h"
#include "lockstep/data.h"

namespace lockstep::data {
namespace {

using testing::TempDir;
using testing::throwsWith;

const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

std::vector<uint8_t> pattern(size_t n, uint32_t mul) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * mul + 7) % 256);
  return v;
}

// Writes a consistent tiny split of n images into dir (prefix "train" or "t10k").
void writeTinyMnist(const TempDir& dir, const std::string& prefix, int64_t n, bool gzip) {
  const std::string sfx = gzip ? ".gz" : "";
  writeIdxFile(dir.file(prefix + "-images-idx3-ubyte" + sfx), {n, 28, 28}, pattern(n * 784, 31), gzip);
  std::vector<uint8_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  writeIdxFile(dir.file(prefix + "-labels-idx1-ubyte" + sfx), {n}, labels, gzip);
}

// Raw IDX bytes with the given magic and dims, then `data`.
std::vector<uint8_t> idxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

TEST(Mnist, real_fashion_mnist_train_and_test) {
  if (!std::filesystem::exists(std::string(kFashionDir) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  TensorDataset train = loadMnist(kFashionDir, Split::train, {.mean = 0.2860, .std = 0.3530});
  TensorDataset test = loadMnist(kFashionDir, Split::test, {.mean = 0.2860, .std = 0.3530});
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(train.inputs().shape(), Shape({60000, 1, 28, 28}));
  EXPECT_EQ(train.inputs().dtype(), DType::f32);
  EXPECT_EQ(train.targets().dtype(), DType::i64);
  std::vector<int64_t> counts(10, 0);
  for (int64_t y : train.targets().toVector<int64_t>()) {
    ASSERT_GE(y, 0);
    ASSERT_LE(y, 9);
    ++counts[y];
  }
  for (int64_t c : counts) EXPECT_EQ(c, 6000);  // Fashion-MNIST is balanced
  // Normalised with the data set's own statistics: mean ~0, std ~1.
  const float* x = train.inputs().data<float>();
  double sum = 0, sq = 0;
  const int64_t n = train.inputs().numel();
  for (int64_t i = 0; i < n; ++i) {
    sum += x[i];
    sq += static_cast<double>(x[i]) * x[i];
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / n - (sum / n) * (sum / n)), 1.0, 0.01);
}

TEST(Mnist, tiny_gzip_and_raw_give_the_same_dataset) {
  TempDir gz_dir, raw_dir;
  writeTinyMnist(gz_dir, "train", 12, true);
  writeTinyMnist(raw_dir, "train", 12, false);
  TensorDataset a = loadMnist(gz_dir.str(), Split::train);
  TensorDataset b = loadMnist(raw_dir.str(), Split::train);
  ASSERT_EQ(a.size(), 12);
  EXPECT_EQ(a.inputs().toVector<float>(), b.inputs().toVector<float>());
  EXPECT_EQ(a.targets().toVector<int64_t>(), b.targets().toVector<int64_t>());
  EXPECT_EQ(a.targets().toVector<int64_t>()[11], 1);
  // Pixel 5 of image 0 is (5 * 31 + 7) % 256 = 162.
  EXPECT_FLOAT_EQ(a.inputs().toVector<float>()[5], static_cast<float>((162 / 255.0 - 0.1307) / 0.3081));
}

TEST(Mnist, test_split_uses_t10k_files) {
  TempDir dir;
  writeTinyMnist(dir, "t10k", 3, true);
  EXPECT_EQ(loadMnist(dir.str(), Split::test).size(), 3);
  EXPECT_TRUE(throwsWith<IoError>([&] { loadMnist(dir.str(), Split::train); },
                                  {"train-images-idx3-ubyte", "not found"}));
}

TEST(Idx, round_trip_keeps_dims_and_bytes) {
  TempDir dir;
  const auto data = pattern(2 * 3 * 4, 5);
  writeIdxFile(dir.file("a.gz"), {2, 3, 4}, data, true);
  IdxArray a = readIdxFile(dir.file("a.gz"), kIdxImagesMagic);
  EXPECT_EQ(a.magic, kIdxImagesMagic);
  EXPECT_EQ(a.dims, std::vector<int64_t>({2, 3, 4}));
  EXPECT_EQ(a.data, data);
}

TEST(Idx, bad_magic_names_file_and_magic) {
  TempDir dir;
  writeFileBytes(dir.file("x"), idxBytes(0x00000801, {4}, pattern(4, 1)));
  EXPECT_TRUE(throwsWith<IoError>([&] { readIdxFile(dir.file("x"), kIdxImagesMagic); },
                                  {dir.file("x"), "bad IDX magic 0x00000801", "expected 0x00000803"}));
  writeFileBytes(dir.file("y"), idxBytes(0x12345678, {4}, pattern(4, 1)));
  EXPECT_TRUE(throwsWith<IoError>([&] { readIdxFile(dir.file("y")); }, {dir.file("y"), "bad IDX magic"}));
}

TEST(Idx, truncated_raw_file) {
  TempDir dir;
  auto bytes = idxBytes(kIdxImagesMagic, {3, 28, 28}, pattern(3 * 784, 3));
  bytes.erase(bytes.end() - 100, bytes.end());
  writeFileBytes(dir.file("img"), bytes);
  EXPECT_TRUE(throwsWith<IoError>([&] { readIdxFile(dir.file("img"), kIdxImagesMagic); },
                                  {dir.file("img"), "truncated", "2352", "2252"}));
  writeFileBytes(dir.file("hdr"), std::vector<uint8_t>(bytes.begin(), bytes.begin() + 9));
  EXPECT_TRUE(
      throwsWith<IoError>([&] { readIdxFile(dir.file("hdr")); }, {dir.file("hdr"), "truncated", "header"}));
  writeFileBytes(dir.file("empty"), {});
  EXPECT_TRUE(throwsWith<IoError>([&] { readIdxFile(dir.file("empty")); }, {dir.file("empty"), "truncated"}));
}

TEST(Idx, trailing_bytes_are_rejected) {
  TempDir dir;
  auto bytes = idxBytes(kIdxLabelsMagic, {5}, pattern(5, 1));
  bytes.push_back(0);
  writeFileBytes(dir.file("lab"), bytes, true);
  EXPECT_TRUE(throwsWith<IoError>([&] { readIdxFile(dir.file("lab"), kIdxLabelsMagic); },
                                  {dir.file("lab"), "does not match", "1 trailing bytes"}));
}

TEST(Idx, zero_dim_is_rejected) {
  TempDir dir;
  writeFileBytes(dir.file("z"), idxBytes(kIdxImagesMagic, {0, 28, 28}, {}));
  EXPECT_TRUE(throwsWith<IoError>([&] { readIdxFile(dir.file("z")); }, {dir.file("z"), "dim 0 has size 0"}));
}

TEST(Idx, truncated_gzip_file) {
  TempDir dir;
  writeIdxFile(dir.file("full.gz"), {40, 28, 28}, pattern(40 * 784, 131), true);
  auto gz = readFileBytes(dir.file("full.gz"));
  ASSERT_GT(gz.size(), 100u);
  writeFileBytes(dir.file("cut.gz"), std::vector<uint8_t>(gz.begin(), gz.begin() + gz.size() / 2));
  EXPECT_TRUE(
      throwsWith<IoError>([&] { readIdxFile(dir.file("cut.gz")); }, {dir.file("cut.gz"), "truncated gzip"}));
  // Losing only the 8-byte trailer (CRC and length) still counts as truncation.
  writeFileBytes(dir.file("trailer.gz"), std::vector<uint8_t>(gz.begin(), gz.end() - 4));
  EXPECT_TRUE(throwsWith<IoError>([&] { readIdxFile(dir.file("trailer.gz")); },
                                  {dir.file("trailer.gz"), "truncated"}));
}

TEST(Idx, corrupt_gzip_file) {
  TempDir dir;
  writeIdxFile(dir.file("full.gz"), {40, 28, 28}, pattern(40 * 784, 131), true);
  auto gz = readFileBytes(dir.file("full.gz"));
  auto bad_crc = gz;
  bad_crc[bad_crc.size() - 6] ^= 0xff;  // inside the CRC32 of the trailer
  writeFileBytes(dir.file("crc.gz"), bad_crc);
  EXPECT_TRUE(
      throwsWith<IoError>([&] { readIdxFile(dir.file("crc.gz")); }, {dir.file("crc.gz"), "corrupt gzip"}));
  auto garbage = gz;
  for (size_t i = 20; i < 60; ++i) garbage[i] = static_cast<uint8_t>(i * 37);
  writeFileBytes(dir.file("garbage.gz"), garbage);
  EXPECT_THROW(readIdxFile(dir.file("garbage.gz")), IoError);
}

TEST(Mnist, image_and_label_count_mismatch) {
  TempDir dir;
  writeIdxFile(dir.file("train-images-idx3-ubyte"), {4, 28, 28}, pattern(4 * 784, 1), false);
  writeIdxFile(dir.file("train-labels-idx1-ubyte"), {5}, pattern(5, 0), false);
  EXPECT_TRUE(throwsWith<IoError>(
      [&] { loadMnist(dir.str(), Split::train); },
      {"train-images-idx3-ubyte holds 4 images", "train-labels-idx1-ubyte holds 5 labels"}));
}

TEST(Mnist, wrong_image_size_and_label_range_and_swapped_files) {
  TempDir dir;
  writeIdxFile(dir.file("train-images-idx3-ubyte"), {2, 14, 14}, pattern(2 * 196, 1), false);
  writeIdxFile(dir.file("train-labels-idx1-ubyte"), {2}, {1, 2}, false);
  EXPECT_TRUE(
      throwsWith<IoError>([&] { loadMnist(dir.str(), Split::train); }, {"train-images-idx3-ubyte", "14x14"}));

  writeIdxFile(dir.file("train-images-idx3-ubyte"), {2, 28, 28}, pattern(2 * 784, 1), false);
  writeIdxFile(dir.file("train-labels-idx1-ubyte"), {2}, {1, 12}, false);
  EXPECT_TRUE(throwsWith<IoError>([&] { loadMnist(dir.str(), Split::train); },
                                  {"train-labels-idx1-ubyte", "label 12 of sample 1"}));

  // Labels where images should be: the magic check catches it.
  writeIdxFile(dir.file("train-images-idx3-ubyte"), {2}, {1, 2}, false);
  EXPECT_TRUE(throwsWith<IoError>([&] { loadMnist(dir.str(), Split::train); }, {"bad IDX magic"}));
}

TEST(Idx, missing_or_unwritable_files_name_the_path) {
  EXPECT_TRUE(
      throwsWith<IoError>([] { readIdxFile("/nonexistent/x-idx1-ubyte"); }, {"/nonexistent/x-idx1-ubyte"}));
  EXPECT_TRUE(throwsWith<IoError>([] { writeIdxFile("/nonexistent/dir/out.gz", {1}, {0}, true); },
                                  {"/nonexistent/dir/out.gz"}));
  EXPECT_THROW(writeIdxFile("/tmp/unused", {2, 2}, {0, 1, 2}, false), ValueError);
}

TEST(Mnist, missing_directory_and_bad_options) {
  EXPECT_TRUE(throwsWith<IoError>([] { loadMnist("/nonexistent/mnist", Split::train); },
                                  {"/nonexistent/mnist/train-images-idx3-ubyte.gz", "not found"}));
  EXPECT_THROW(loadMnist("/nonexistent", Split::train, {.mean = 0, .std = 0}), ValueError);
}

}  // namespace

// A gzip file of several members (concatenated, as `cat a.gz b.gz` or gzip's append make: Python's
// gzip and zcat read them whole) was refused as "unexpected bytes after the end".
TEST(Idx, a_gzip_file_of_several_members_reads_as_their_concatenation) {
  TempDir dir;
  const auto bytes = idxBytes(kIdxImagesMagic, {40, 28, 28}, pattern(40 * 784, 131));
  writeFileBytes(dir.file("one"), bytes);
  const size_t half = bytes.size() / 2;
  for (const auto& [mode, from, to] :
       {std::tuple{"wb", size_t{0}, half}, std::tuple{"ab", half, bytes.size()}}) {
    gzFile f = gzopen(dir.file("two.gz").c_str(), mode);
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data() + from, static_cast<unsigned>(to - from)), static_cast<int>(to - from));
    gzclose(f);
  }
  EXPECT_EQ(readMaybeGzipFile(dir.file("two.gz"), 1 << 24), readMaybeGzipFile(dir.file("one"), 1 << 24));
  // Bytes after the last member that are not another member are still refused.
  auto junk = readFileBytes(dir.file("two.gz"));
  junk.insert(junk.end(), {1, 2, 3});
  writeFileBytes(dir.file("junk.gz"), junk);
  EXPECT_TRUE(throwsWith<IoError>([&] { readMaybeGzipFile(dir.file("junk.gz"), 1 << 24); },
                                  {dir.file("junk.gz"), "3 unexpected bytes after the end"}));
}

TEST(Idx, gzip_bomb_is_refused_without_inflating_it) {
  // A header of 10 bytes of data followed by 256 MiB of zeros: a 256 KiB gzip file. It used to be
  // inflated whole (memory for all of it) before the length check; now no more than the header's
  // 10 bytes plus 64 KiB is inflated before it is refused (issue 21).
  TempDir dir;
  auto bytes = idxBytes(kIdxLabelsMagic, {10}, pattern(10, 1));
  bytes.resize(bytes.size() + (size_t{256} << 20), 0);
  writeFileBytes(dir.file("bomb.gz"), bytes, true);
  bytes = {};
  EXPECT_LT(readFileBytes(dir.file("bomb.gz")).size(), size_t{1} << 20);
  EXPECT_TRUE(throwsWith<IoError>([&] { readIdxFile(dir.file("bomb.gz"), kIdxLabelsMagic); },
                                  {dir.file("bomb.gz"), "at least 65536 trailing bytes"}));
  // The same bomb through readMaybeGzipFile stops at its bound.
  EXPECT_TRUE(throwsWith<IoError>([&] { readMaybeGzipFile(dir.file("bomb.gz"), 1 << 20); },
                                  {dir.file("bomb.gz"), "more than 1048576 bytes"}));
}

TEST(Idx, header_promising_more_than_the_gzip_file_holds_is_refused_before_inflating) {
  TempDir dir;
  writeFileBytes(dir.file("big.gz"), idxBytes(kIdxImagesMagic, {1u << 20, 28, 28}, pattern(100, 1)), true);
  EXPECT_TRUE(throwsWith<IoError>([&] { readIdxFile(dir.file("big.gz"), kIdxImagesMagic); },
                                  {dir.file("big.gz"), "822083584 data bytes", "inflates to at most"}));
}

}  // namespace lockstep::data
