// CIFAR-10 binary batches: round trip through writeCifarBinary, the synthetic writer, damage.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "data/data_test_util.h"
#include "lockstep/data.h"

namespace lockstep::data {
namespace {

using testing::TempDir;
using testing::throwsWith;

CifarRaw makeRaw(int64_t n) {
  CifarRaw raw{Tensor::empty({n, 3, 32, 32}, DType::u8), Tensor::empty({n}, DType::i64)};
  uint8_t* p = raw.images.data<uint8_t>();
  for (int64_t i = 0; i < raw.images.numel(); ++i) p[i] = static_cast<uint8_t>((i * 13) % 256);
  for (int64_t i = 0; i < n; ++i) raw.labels.data<int64_t>()[i] = (i * 3) % 10;
  return raw;
}

TEST(Cifar, write_then_read_round_trips) {
  TempDir dir;
  CifarRaw raw = makeRaw(7);
  writeCifarBinary(dir.file("b.bin"), raw.images, raw.labels);
  EXPECT_EQ(readFileBytes(dir.file("b.bin")).size(), 7u * 3073u);
  CifarRaw back = readCifarBinary(dir.file("b.bin"));
  EXPECT_EQ(back.images.toVector<int64_t>(), raw.images.toVector<int64_t>());
  EXPECT_EQ(back.labels.toVector<int64_t>(), raw.labels.toVector<int64_t>());
}

TEST(Cifar, load_concatenates_train_files_and_normalises_per_channel) {
  TempDir dir;
  writeSyntheticCifar10(dir.str(), {.train_per_file = 6, .test_samples = 4, .seed = 3});
  TensorDataset train = loadCifar10(dir.str(), Split::train);
  TensorDataset test = loadCifar10(dir.str(), Split::test);
  EXPECT_EQ(train.size(), 30);
  EXPECT_EQ(test.size(), 4);
  EXPECT_EQ(train.inputs().shape(), Shape({30, 3, 32, 32}));
  // Sample 6 is the first record of data_batch_2.bin.
  CifarRaw second = readCifarBinary(dir.file("data_batch_2.bin"));
  EXPECT_EQ(train.targets().toVector<int64_t>()[6], second.labels.toVector<int64_t>()[0]);
  const CifarOptions o;
  for (int64_t c = 0; c < 3; ++c) {
    const double raw = second.images.data<uint8_t>()[c * 1024 + 17];
    const float got = train.inputs().data<float>()[6 * 3072 + c * 1024 + 17];
    EXPECT_NEAR(got, (raw / 255.0 - o.mean[c]) / o.std[c], 1e-5) << "channel " << c;
  }
  for (int64_t y : train.targets().toVector<int64_t>()) EXPECT_TRUE(y >= 0 && y <= 9);
}

// The registry says what a black pixel becomes after the loader's normalisation, per channel: what
// data.transforms.random_crop pads with (torchvision pads with black before Normalize).
TEST(Cifar, registry_gives_the_normalised_value_of_black) {
  TempDir dir;
  writeSyntheticCifar10(dir.str(), {.train_per_file = 6, .test_samples = 4, .seed = 3});
  CifarRaw raw = makeRaw(6);
  std::fill_n(raw.images.data<uint8_t>(), 3 * 1024, uint8_t{0});  // sample 0 black
  writeCifarBinary(dir.file("data_batch_1.bin"), raw.images, raw.labels);
  DatasetOptions o;
  o.root = dir.str();
  for (const std::optional<double> mean : {std::optional<double>(), std::optional<double>(0.5)}) {
    o.normalize_mean = mean;
    o.normalize_std = mean;
    const DatasetSplits s = findDataset("cifar10").load(o);
    ASSERT_EQ(s.black.size(), 3u);
    const Tensor black = s.train->get(0).input;
    for (int64_t c = 0; c < 3; ++c)
      EXPECT_EQ(s.black[static_cast<size_t>(c)], black.data<float>()[c * 1024]) << "channel " << c;
    if (mean) {
      EXPECT_EQ(s.black[0], -1.0f);
    }
  }
}

TEST(Cifar, synthetic_data_is_deterministic_in_seed) {
  TempDir a, b, c;
  writeSyntheticCifar10(a.str(), {.train_per_file = 3, .test_samples = 3, .seed = 1});
  writeSyntheticCifar10(b.str(), {.train_per_file = 3, .test_samples = 3, .seed = 1});
  writeSyntheticCifar10(c.str(), {.train_per_file = 3, .test_samples = 3, .seed = 2});
  EXPECT_EQ(readFileBytes(a.file("test_batch.bin")), readFileBytes(b.file("test_batch.bin")));
  EXPECT_NE(readFileBytes(a.file("test_batch.bin")), readFileBytes(c.file("test_batch.bin")));
}

TEST(Cifar, truncated_file_names_file_and_record_size) {
  TempDir dir;
  CifarRaw raw = makeRaw(3);
  writeCifarBinary(dir.file("b.bin"), raw.images, raw.labels);
  auto bytes = readFileBytes(dir.file("b.bin"));
  bytes.erase(bytes.end() - 1000, bytes.end());
  writeFileBytes(dir.file("cut.bin"), bytes);
  EXPECT_TRUE(throwsWith<IoError>([&] { readCifarBinary(dir.file("cut.bin")); },
                                  {dir.file("cut.bin"), "truncated", "3073-byte record", "2 whole records"}));
  writeFileBytes(dir.file("empty.bin"), {});
  EXPECT_TRUE(
      throwsWith<IoError>([&] { readCifarBinary(dir.file("empty.bin")); }, {dir.file("empty.bin"), "empty"}));
}

TEST(Cifar, label_out_of_range_and_missing_files) {
  TempDir dir;
  CifarRaw raw = makeRaw(3);
  writeCifarBinary(dir.file("b.bin"), raw.images, raw.labels);
  auto bytes = readFileBytes(dir.file("b.bin"));
  bytes[3073] = 200;  // label of record 1
  writeFileBytes(dir.file("bad.bin"), bytes);
  EXPECT_TRUE(throwsWith<IoError>([&] { readCifarBinary(dir.file("bad.bin")); },
                                  {dir.file("bad.bin"), "record 1 has label 200"}));
  EXPECT_TRUE(
      throwsWith<IoError>([&] { loadCifar10(dir.str(), Split::train); },
                          {dir.str(), "holds no CIFAR-10", "data_batch_1..5.bin", "cifar-10-batches-py/"}));
  writeCifarBinary(dir.file("data_batch_1.bin"), raw.images, raw.labels);  // the others missing
  EXPECT_TRUE(
      throwsWith<IoError>([&] { loadCifar10(dir.str(), Split::train); }, {"data_batch_2.bin", "not found"}));
}

TEST(Cifar, writer_rejects_bad_input) {
  TempDir dir;
  CifarRaw raw = makeRaw(2);
  EXPECT_THROW(writeCifarBinary(dir.file("x"), raw.images.to(DType::f32), raw.labels), ValueError);
  EXPECT_THROW(writeCifarBinary(dir.file("x"), raw.images, Tensor::fromVector<int64_t>({1, 10}, {2})),
               ValueError);
  EXPECT_THROW(writeCifarBinary(dir.file("x"), raw.images, Tensor::fromVector<int64_t>({1}, {1})),
               ValueError);
}

}  // namespace
}  // namespace lockstep::data
