// `lockstep train` against checkpoints and data files that are not what they seem (issue 21): a
// reused output directory, a tampered state file, a crafted safetensors header and a compressed
// bomb are each refused with a message naming the file, exit 2, and bounded memory.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "lockstep/data/datasets/idx_file.h"
#include "lockstep/data/file_bytes.h"
#include "lockstep/util/file.h"
#include "train/train_cli.h"

using namespace lockstep::test;

namespace {

struct Measured {
  int code = -1;
  std::string output;
  long peak_rss_kb = 0;  // of the lockstep process (and anything it waited for)
};

// Runs `lockstep train ARGS` under /usr/bin/time for its peak resident set size (measured by a
// small parent: a child forked from this test would inherit the test's own high-water mark).
Measured runMeasured(const std::string& args, const std::string& out) {
  const std::string cmd = "/usr/bin/time -f 'peak_rss_kb=%M' " + std::string(LOCKSTEP_BIN) + " train " +
                          args + " > " + out + " 2>&1";
  const int status = std::system(cmd.c_str());
  Measured m{WIFEXITED(status) ? WEXITSTATUS(status) : -1, readFile(out), 0};
  const size_t at = m.output.rfind("peak_rss_kb=");
  if (at != std::string::npos) m.peak_rss_kb = std::stol(m.output.substr(at + 12));
  return m;
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Rewrites one file of a checkpoint and its manifest so that every checksum matches again: a
// checkpoint crafted on purpose, which only the decoders themselves can refuse.
void craft(const std::string& ckpt, const std::string& name, const std::string& bytes) {
  std::ofstream(ckpt + "/" + name, std::ios::binary) << bytes;
  auto m = nlohmann::json::parse(readFile(ckpt + "/manifest.json"));
  m["manifest"]["files"][name] = {{"bytes", bytes.size()}, {"crc32", lockstep::file::crc32(bytes)}};
  m["crc32"] = lockstep::file::crc32(m["manifest"].dump());
  std::ofstream(ckpt + "/manifest.json") << m.dump(2);
}

}  // namespace

TEST_F(TrainCli, reused_output_dir_does_not_resume_or_prune_another_runs_checkpoints) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --output-dir " + dir_ + "/o --set max_steps=12").code, 0);
  // Another run (another learning rate) in the same output dir: --resume refuses the first run's
  // checkpoints and says how to take one on purpose.
  std::string other = writeConfig("other.yaml", std::string(kSynthetic) + "seed: 5\n");
  Result refused = run(other + " --output-dir " + dir_ + "/o --resume");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("ckpt-12 (it was trained with seed 1, this run uses seed 5)"),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("--resume-from " + dir_ + "/o/checkpoints/ckpt-12"), std::string::npos)
      << refused.output;
  std::string text = kSynthetic;
  text.replace(text.find("lr: 0.01"), 8, "lr: 0.02");
  std::string lr = writeConfig("lr.yaml", text);
  refused = run(lr + " --output-dir " + dir_ + "/o --resume");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("another config"), std::string::npos) << refused.output;
  // Started afresh there (no --resume), the new run's checkpoints survive keep_last pruning even
  // though the old run's have higher steps, and the old run's are kept too.
  Result fresh = run(lr + " --output-dir " + dir_ + "/o --set max_steps=8");
  ASSERT_EQ(fresh.code, 0) << fresh.output;
  EXPECT_NE(fresh.output.find("already holds checkpoints of other runs (ckpt-12, ckpt-8, ckpt-6)"),
            std::string::npos)
      << fresh.output;
  for (const char* c : {"ckpt-4", "ckpt-6", "ckpt-8", "ckpt-12"})
    EXPECT_TRUE(fs::exists(dir_ + "/o/checkpoints/" + std::string(c) + "/manifest.json")) << c;
  EXPECT_EQ(trimmed(readFile(dir_ + "/o/checkpoints/latest")), "ckpt-8");
  // --resume of the new run honours `latest` (its own ckpt-8), not the higher ckpt-12.
  Result resumed = run(lr + " --output-dir " + dir_ + "/o --set max_steps=10 --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from " + dir_ + "/o/checkpoints/ckpt-8 (step 8)"),
            std::string::npos)
      << resumed.output;
  // --resume-from takes the first run's checkpoint on purpose, saying so.
  Result purpose = run(lr + " --output-dir " + dir_ + "/p --set max_steps=13 --resume-from " + dir_ +
                       "/o/checkpoints/ckpt-12");
  ASSERT_EQ(purpose.code, 0) << purpose.output;
  EXPECT_NE(purpose.output.find("resuming on purpose"), std::string::npos) << purpose.output;
  EXPECT_NE(purpose.output.find("(step 12)"), std::string::npos) << purpose.output;
}

TEST_F(TrainCli, tampered_state_file_is_skipped_on_resume_and_refused_on_purpose) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --output-dir " + dir_ + "/o --set max_steps=9").code, 0);
  const std::string ckpt = dir_ + "/o/checkpoints/" + trimmed(readFile(dir_ + "/o/checkpoints/latest"));
  std::string state = readFile(ckpt + "/state.json");
  size_t at = state.find("\"position\": ");
  ASSERT_NE(at, std::string::npos) << state;
  at += 12;
  state[at] = state[at] == '1' ? '2' : '1';  // one digit of the data position
  std::ofstream(ckpt + "/state.json") << state;
  Measured m = runMeasured(cfg + " --output-dir " + dir_ + "/p --resume-from " + ckpt, dir_ + "/m.txt");
  EXPECT_EQ(m.code, 2) << m.output;
  EXPECT_NE(m.output.find(ckpt + "/state.json' fails its CRC-32 check"), std::string::npos) << m.output;
  Result fallback = run(cfg + " --output-dir " + dir_ + "/o --resume");
  ASSERT_EQ(fallback.code, 0) << fallback.output;
  EXPECT_NE(fallback.output.find(ckpt + "/state.json' fails its CRC-32 check"), std::string::npos)
      << fallback.output;
  EXPECT_NE(fallback.output.find("(step 8)"), std::string::npos) << fallback.output;
  std::printf("tampered state.json: exit %d, peak RSS %ld KiB\n", m.code, m.peak_rss_kb);
}

TEST_F(TrainCli, crafted_safetensors_header_is_refused_naming_the_file) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --output-dir " + dir_ + "/o --set max_steps=4").code, 0);
  const std::string ckpt = dir_ + "/o/checkpoints/ckpt-4";
  // 2^32 x 2^32 F32: its byte count overflows 64 bits to 0, which matched an empty data range.
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  craft(ckpt, "model.safetensors", bytes + json);
  Measured m = runMeasured(cfg + " --output-dir " + dir_ + "/p --resume-from " + ckpt, dir_ + "/m.txt");
  EXPECT_EQ(m.code, 2) << m.output;
  EXPECT_NE(m.output.find(ckpt + "/model.safetensors"), std::string::npos) << m.output;
  EXPECT_NE(m.output.find("overflows 64 bits"), std::string::npos) << m.output;
  EXPECT_LT(m.peak_rss_kb, 200 * 1024) << m.output;
  std::printf("crafted safetensors header: exit %d, peak RSS %ld KiB\n", m.code, m.peak_rss_kb);
}

TEST_F(TrainCli, gzip_bomb_in_the_data_is_refused_with_bounded_memory) {
  // Fashion-MNIST files whose training images are 10 images followed by 256 MiB of zeros (a
  // 256 KiB gzip file); the other three are genuine.
  namespace data = lockstep::data;
  const std::string root = dir_ + "/fm";
  fs::create_directories(root);
  std::vector<uint8_t> images(4 + 12 + 10 * 784, 0);
  const uint8_t header[16] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
  std::copy(header, header + 16, images.begin());
  images.resize(images.size() + (size_t{256} << 20), 0);
  data::writeFileBytes(root + "/train-images-idx3-ubyte.gz", images, true);
  images = {};
  data::writeIdxFile(root + "/train-labels-idx1-ubyte.gz", {10}, std::vector<uint8_t>(10, 1), true);
  data::writeIdxFile(root + "/t10k-images-idx3-ubyte.gz", {2, 28, 28}, std::vector<uint8_t>(2 * 784, 7),
                     true);
  data::writeIdxFile(root + "/t10k-labels-idx1-ubyte.gz", {2}, std::vector<uint8_t>(2, 1), true);
  std::string cfg = writeConfig("fm.yaml", "model: mnist_cnn\ndata: {dataset: fashion_mnist, root: " + root +
                                               "}\ntrain_micro_batch_size_per_gpu: 2\nmax_steps: 1\n");
  Measured m = runMeasured(cfg + " --output-dir " + dir_ + "/o", dir_ + "/m.txt");
  EXPECT_EQ(m.code, 2) << m.output;
  EXPECT_NE(m.output.find(root + "/train-images-idx3-ubyte.gz: IDX file length does not match its header"),
            std::string::npos)
      << m.output;
  EXPECT_LT(m.peak_rss_kb, 150 * 1024) << m.output;
  std::printf("gzip bomb (%zu bytes, 256 MiB inflated): exit %d, peak RSS %ld KiB\n",
              static_cast<size_t>(fs::file_size(root + "/train-images-idx3-ubyte.gz")), m.code,
              m.peak_rss_kb);
}

// A signal that cut a pruning or a save short leaves hidden directories (.deleting-ckpt-<step>
// missing files, .ckpt-<step>.tmp-* without a manifest): --resume passes over them and the run's
// start removes them.
TEST_F(TrainCli, resume_ignores_and_removes_what_interrupted_saves_and_prunings_left) {
  std::string cfg = writeConfig("c.yaml", kSynthetic);
  ASSERT_EQ(run(cfg + " --output-dir " + dir_ + "/o --set max_steps=8").code, 0);
  const std::string ck = dir_ + "/o/checkpoints";
  fs::copy(ck + "/ckpt-4", ck + "/.deleting-ckpt-2");
  fs::remove(ck + "/.deleting-ckpt-2/model.safetensors");
  fs::copy(ck + "/ckpt-8", ck + "/.ckpt-12.tmp-999");
  fs::remove(ck + "/.ckpt-12.tmp-999/manifest.json");
  Result resumed = run(cfg + " --output-dir " + dir_ + "/o --set max_steps=10 --resume");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from " + ck + "/ckpt-8 (step 8)"), std::string::npos)
      << resumed.output;
  EXPECT_NE(resumed.output.find("note: removed " + ck + "/.deleting-ckpt-2"), std::string::npos)
      << resumed.output;
  EXPECT_FALSE(fs::exists(ck + "/.deleting-ckpt-2"));
  EXPECT_FALSE(fs::exists(ck + "/.ckpt-12.tmp-999"));
  for (const auto& e : fs::directory_iterator(ck)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "latest" || name.rfind("ckpt-", 0) == 0) << name;
  }
  EXPECT_EQ(trimmed(readFile(ck + "/latest")), "ckpt-10");
}
