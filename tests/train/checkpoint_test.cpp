#include "lockstep/train/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lockstep/util/file.h"

using namespace lockstep;
using namespace lockstep::train;
namespace fs = std::filesystem;

namespace {
std::string tempDir() {
  std::string t = (fs::temp_directory_path() / "lockstep-ckpt-XXXXXX").string();
  return ::mkdtemp(t.data());
}
CheckpointData sample(int64_t step) {
  CheckpointData d;
  d.step = step;
  d.model = {{"w", Tensor::full({2, 2}, static_cast<double>(step))}};
  d.optimizer = {{"w.momentum", Tensor::full({2, 2}, 0.5)}};
  d.state = {{"data", {{"epoch", 1}, {"step", step}}}, {"rng", {{"seed", 7}, {"offset", 123}}}};
  return d;
}
void flipByte(const std::string& path, size_t pos) {
  std::string b = file::readAll(path);
  b[pos] ^= 0x5a;
  std::ofstream(path, std::ios::binary) << b;
}
}  // namespace

TEST(Checkpoint, save_load_round_trip) {
  std::string dir = tempDir();
  std::string path = saveCheckpoint(dir, sample(10));
  EXPECT_EQ(file::readAll(dir + "/latest"), "ckpt-10\n");
  CheckpointData d = loadCheckpoint(path);
  EXPECT_EQ(d.step, 10);
  EXPECT_EQ(d.model.at(0).second.toVector<float>(), std::vector<float>(4, 10.0f));
  EXPECT_EQ(d.optimizer.at(0).first, "w.momentum");
  EXPECT_EQ(d.state["rng"]["offset"], 123);
  fs::remove_all(dir);
}

TEST(Checkpoint, keep_last_prunes_oldest) {
  std::string dir = tempDir();
  for (int s : {1, 2, 3, 4}) saveCheckpoint(dir, sample(s), {.keep_last = 2});
  auto all = listCheckpoints(dir);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(fs::path(all[0]).filename(), "ckpt-4");
  EXPECT_EQ(fs::path(all[1]).filename(), "ckpt-3");
  fs::remove_all(dir);
}

TEST(Checkpoint, tampered_file_fails_checksum) {
  std::string dir = tempDir();
  std::string path = saveCheckpoint(dir, sample(5));
  flipByte(path + "/model.safetensors", 100);
  try {
    loadCheckpoint(path);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CRC-32"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, truncated_file_is_named) {
  std::string dir = tempDir();
  std::string path = saveCheckpoint(dir, sample(5));
  fs::resize_file(path + "/optimizer.safetensors", 20);
  try {
    loadCheckpoint(path);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.safetensors"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, latest_skips_corrupt_newest) {
  std::string dir = tempDir();
  saveCheckpoint(dir, sample(1));
  std::string newest = saveCheckpoint(dir, sample(2));
  flipByte(newest + "/model.safetensors", 90);
  std::string loaded;
  auto d = loadLatestCheckpoint(dir, &loaded);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->step, 1);
  EXPECT_EQ(fs::path(loaded).filename(), "ckpt-1");
  fs::remove_all(dir);
}

TEST(Checkpoint, unwritable_directory_is_a_clear_error) {
  if (::geteuid() == 0) {
    // root ignores permissions: use a path under a regular file instead.
    std::string dir = tempDir();
    std::ofstream(dir + "/file") << "x";
    EXPECT_THROW(saveCheckpoint(dir + "/file/sub", sample(1)), IoError);
    fs::remove_all(dir);
    return;
  }
  EXPECT_THROW(saveCheckpoint("/proc/lockstep-no-such-dir", sample(1)), IoError);
}
