#include "lockstep/train/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "lockstep/train/checkpoint/resume.h"
#include "lockstep/util/file.h"

using namespace lockstep;
using namespace lockstep::train;
namespace fs = std::filesystem;

namespace {
std::string tempDir() {
  std::string t = (fs::temp_directory_path() / "lockstep-ckpt-XXXXXX").string();
  return ::mkdtemp(t.data());
}
RunIdentity runA() { return {"aaaaaaaaaaaaaaaa", "0000000a", 7, 1, 8, 8, 1}; }
RunIdentity runB() { return {"bbbbbbbbbbbbbbbb", "0000000b", 7, 1, 8, 8, 1}; }
CheckpointData sample(int64_t step, const RunIdentity& id = runA()) {
  CheckpointData d;
  d.step = step;
  d.identity = id;
  d.config = {{"document", {{"seed", 7}}}};
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

namespace {
std::vector<std::string> entriesOf(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}
}  // namespace

TEST(Checkpoint, pruning_leaves_nothing_of_the_pruned_checkpoints) {
  std::string dir = tempDir();
  for (int s : {1, 2, 3, 4}) saveCheckpoint(dir, sample(s), {.keep_last = 2});
  EXPECT_EQ(entriesOf(dir), (std::vector<std::string>{"ckpt-3", "ckpt-4", "latest"}));
  fs::remove_all(dir);
}

// What a signal leaves when it cuts a pruning short (a .deleting- directory with some files gone)
// or a save (a temp directory without its manifest), and an older save of a step whose new save
// is in place: none of it is listed or resumed, and the next run's start removes it.
TEST(Checkpoint, leftovers_of_interrupted_saves_and_removals_are_ignored_and_removed) {
  std::string dir = tempDir();
  saveCheckpoint(dir, sample(2));
  saveCheckpoint(dir, sample(4));
  fs::copy(dir + "/ckpt-2", dir + "/.deleting-ckpt-1");
  fs::remove(dir + "/.deleting-ckpt-1/optimizer.safetensors");
  fs::copy(dir + "/ckpt-4", dir + "/.ckpt-6.tmp-4242");
  fs::remove(dir + "/.ckpt-6.tmp-4242/manifest.json");
  fs::copy(dir + "/ckpt-4", dir + "/.ckpt-4.old-4242");
  fs::copy(dir + "/ckpt-4", dir + "/.ckpt-8.old-4242");  // no ckpt-8: the only copy of step 8, kept
  std::ofstream(dir + "/.deleting-note") << "a file, not a directory: not ours";

  auto listed = listCheckpoints(dir);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(fs::path(listed[0]).filename(), "ckpt-4");
  ResumePick pick = pickResumeCheckpoint({dir, "", true, runA()});
  ASSERT_TRUE(pick.data.has_value());
  EXPECT_EQ(pick.data->step, 4);

  // A `latest` whose write was cut between its temp file and the rename (kill -9).
  std::ofstream(dir + "/.latest.tmp.Ab12Cd") << "ckpt-6\n";

  auto removed = removeUnfinishedCheckpoints(dir);
  EXPECT_EQ(removed.size(), 4u);
  EXPECT_EQ(entriesOf(dir),
            (std::vector<std::string>{".ckpt-8.old-4242", ".deleting-note", "ckpt-2", "ckpt-4", "latest"}));
  EXPECT_EQ(loadCheckpoint(dir + "/ckpt-4").step, 4);
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

TEST(Checkpoint, a_selection_loads_only_the_tensors_it_names_and_still_verifies_every_file_whole) {
  // What a pipeline stage resuming a DDP checkpoint does: its layers' tensors and their optimizer
  // state, the rest never decoded.
  std::string dir = tempDir();
  CheckpointData d = sample(6);
  d.model = {{"a", Tensor::full({64}, 1.0)}, {"b", Tensor::full({3}, 2.0)}, {"c", Tensor::full({64}, 3.0)}};
  d.optimizer = {{"0.exp_avg", Tensor::full({64}, 4.0)},
                 {"1.exp_avg", Tensor::full({3}, 5.0)},
                 {"1.step", Tensor::full({1}, 6.0)},
                 {"12.exp_avg", Tensor::full({64}, 7.0)}};
  const std::string path = saveCheckpoint(dir, d);
  CheckpointSelection keep;
  keep.model = [](const std::string& name) { return name == "b"; };
  keep.optimizer = [](const std::string& key) { return key.rfind("1.", 0) == 0; };
  const CheckpointData got = loadCheckpoint(path, keep);
  ASSERT_EQ(got.model.size(), 1u);
  EXPECT_EQ(got.model[0].first, "b");
  EXPECT_EQ(got.model[0].second.toVector<float>(), std::vector<float>(3, 2.0f));
  ASSERT_EQ(got.optimizer.size(), 2u);
  EXPECT_EQ(got.optimizer[0].first, "1.exp_avg");
  EXPECT_EQ(got.optimizer[0].second.toVector<float>(), std::vector<float>(3, 5.0f));
  EXPECT_EQ(got.optimizer[1].first, "1.step");
  EXPECT_EQ(got.state["rng"]["offset"], 123);
  // Only the model's file selected: the optimizer's comes whole.
  CheckpointSelection model_only;
  model_only.model = keep.model;
  EXPECT_EQ(loadCheckpoint(path, model_only).optimizer.size(), 4u);
  // A byte of a tensor nobody selected is still checked: every rank agrees on what verifies.
  const std::string bytes = file::readAll(path + "/model.safetensors");
  flipByte(path + "/model.safetensors", bytes.size() - 4);  // in "c", the last tensor
  try {
    loadCheckpoint(path, keep);
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

TEST(Checkpoint, every_file_is_in_the_manifest_and_the_manifest_is_checked) {
  std::string dir = tempDir();
  std::string path = saveCheckpoint(dir, sample(5));
  auto m = nlohmann::json::parse(file::readAll(path + "/manifest.json"));
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json", "config.json"})
    EXPECT_TRUE(m["manifest"]["files"].contains(f)) << f;
  EXPECT_EQ(m["manifest"]["identity"]["run_id"], "aaaaaaaaaaaaaaaa");
  EXPECT_EQ(loadCheckpoint(path).config["document"]["seed"], 7);
  // One digit of the manifest changed: its own CRC-32 no longer matches.
  std::string text = file::readAll(path + "/manifest.json");
  text.replace(text.find("\"step\": 5"), 9, "\"step\": 6");
  std::ofstream(path + "/manifest.json") << text;
  try {
    loadCheckpoint(path);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path + "/manifest.json' fails its CRC-32 check"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// A manifest nested 200,000 deep (400 KB) crashed every walk of it (the CRC's dump() recursed
// past the stack): now the parse refuses it, and the checkpoint is one that does not verify.
TEST(Checkpoint, a_deeply_nested_manifest_is_refused_not_a_crash) {
  std::string dir = tempDir();
  saveCheckpoint(dir, sample(2));
  std::string path = saveCheckpoint(dir, sample(4));
  const int n = 200000;
  std::ofstream(path + "/manifest.json")
      << "{\"crc32\":1,\"manifest\":{\"x\":" + std::string(n, '[') + std::string(n, ']') + "}}";
  try {
    loadCheckpoint(path);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << e.what();
  }
  ResumePick pick = pickResumeCheckpoint({dir, "", true, runA()});  // skipped: ckpt-2 resumes
  ASSERT_TRUE(pick.data.has_value());
  EXPECT_EQ(pick.data->step, 2);
  fs::remove_all(dir);
}

// Symlink loops (a checkpoint's file, or anything beside the checkpoints): an unreadable
// checkpoint is skipped as a corrupt one is, an entry that is none is ignored; no filesystem_error.
TEST(Checkpoint, symlink_loops_are_named_or_ignored) {
  std::string dir = tempDir();
  saveCheckpoint(dir, sample(2));
  std::string path = saveCheckpoint(dir, sample(4));
  fs::create_symlink("loop", dir + "/loop");
  fs::remove(path + "/state.json");
  fs::create_symlink("state.json", path + "/state.json");
  auto listed = listCheckpoints(dir);
  EXPECT_EQ(listed.size(), 2u);
  EXPECT_EQ(removeUnfinishedCheckpoints(dir).size(), 0u);
  try {
    loadCheckpoint(path);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path + "/state.json"), std::string::npos) << e.what();
  }
  ResumePick pick = pickResumeCheckpoint({dir, "", true, runA()});
  ASSERT_TRUE(pick.data.has_value());
  EXPECT_EQ(pick.data->step, 2);
  EXPECT_THROW(pickResumeCheckpoint({dir, dir + "/loop", true, runA()}), IoError);
  fs::remove_all(dir);
}

TEST(Checkpoint, a_flipped_digit_in_state_json_is_refused) {
  // Issue 21: state.json (data position, step, learning rate) was covered by no checksum.
  std::string dir = tempDir();
  std::string path = saveCheckpoint(dir, sample(5));
  std::string text = file::readAll(path + "/state.json");
  size_t at = text.find("123");  // the RNG offset
  ASSERT_NE(at, std::string::npos) << text;
  text[at] = '4';
  std::ofstream(path + "/state.json") << text;
  try {
    loadCheckpoint(path);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path + "/state.json' fails its CRC-32 check"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, keep_last_prunes_only_this_runs_checkpoints) {
  // Issue 21: a new run in a reused directory saw its own checkpoints pruned at once, because
  // another run's higher-numbered ones counted as newer.
  std::string dir = tempDir();
  for (int s : {100, 200}) saveCheckpoint(dir, sample(s, runA()));
  for (int s : {4, 8, 12}) saveCheckpoint(dir, sample(s, runB()), {.keep_last = 2});
  std::vector<std::string> names;
  for (const auto& p : listCheckpoints(dir)) names.push_back(fs::path(p).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt-200", "ckpt-100", "ckpt-12", "ckpt-8"}));
  EXPECT_EQ(file::readAll(dir + "/latest"), "ckpt-12\n");
  fs::remove_all(dir);
}

TEST(Resume, takes_latest_then_the_newest_valid_naming_each_file_skipped) {
  std::string dir = tempDir();
  saveCheckpoint(dir, sample(1));
  saveCheckpoint(dir, sample(3));
  std::string two = saveCheckpoint(dir, sample(2));  // latest names ckpt-2, not the higher ckpt-3
  ResumePick p = pickResumeCheckpoint({dir, "", true, runA()});
  ASSERT_TRUE(p.data.has_value());
  EXPECT_EQ(p.data->step, 2);
  flipByte(two + "/model.safetensors", 90);
  p = pickResumeCheckpoint({dir, "", true, runA()});
  ASSERT_TRUE(p.data.has_value());
  EXPECT_EQ(p.data->step, 3);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find(two + "/model.safetensors' fails its CRC-32 check"), std::string::npos)
      << p.notes[0];
  fs::remove_all(dir);
}

// A `latest` that names no checkpoint (edited, damaged) is said, and the newest that verifies is
// taken; a FIFO put in place of a checkpoint's file is refused at once instead of blocking the
// read forever.
TEST(Resume, a_latest_naming_nothing_is_said_and_a_fifo_is_no_file) {
  std::string dir = tempDir();
  saveCheckpoint(dir, sample(1));
  const std::string three = saveCheckpoint(dir, sample(3));
  std::ofstream(dir + "/latest") << "ckpt-99999\n";
  ResumePick p = pickResumeCheckpoint({dir, "", true, runA()});
  ASSERT_TRUE(p.data.has_value());
  EXPECT_EQ(p.data->step, 3);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find(dir + "/latest names no checkpoint"), std::string::npos) << p.notes[0];
  fs::remove(three + "/model.safetensors");
  ASSERT_EQ(::mkfifo((three + "/model.safetensors").c_str(), 0644), 0);
  p = pickResumeCheckpoint({dir, "", true, runA()});  // blocked forever in the read before
  ASSERT_TRUE(p.data.has_value());
  EXPECT_EQ(p.data->step, 1);
  ASSERT_EQ(p.notes.size(), 2u);
  EXPECT_NE(p.notes[1].find(three + "/model.safetensors' is not a regular file"), std::string::npos)
      << p.notes[1];
  fs::remove_all(dir);
}

// Checkpoints there and none that verifies (a damaged manifest, a truncated file): no fresh start
// over them, for --resume and a restarted worker alike; each is named with its reason.
TEST(Resume, checkpoints_none_of_which_verifies_are_an_error_not_a_fresh_start) {
  std::string dir = tempDir();
  const std::string two = saveCheckpoint(dir, sample(2));
  const std::string four = saveCheckpoint(dir, sample(4));
  { std::ofstream(two + "/manifest.json", std::ios::trunc) << "{"; }
  fs::resize_file(four + "/model.safetensors", 20);
  for (bool required : {true, false}) {
    try {
      pickResumeCheckpoint({dir, "", required, runA()});
      ADD_FAILURE() << "expected IoError, required " << required;
    } catch (const IoError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("no checkpoint in " + dir + " verifies"), std::string::npos) << m;
      EXPECT_NE(m.find("ckpt-2 ("), std::string::npos) << m;
      EXPECT_NE(m.find("ckpt-4 ("), std::string::npos) << m;
      EXPECT_NE(m.find("--resume-from"), std::string::npos) << m;
    }
  }
  // Both are still there, untouched by the refusal.
  EXPECT_TRUE(fs::exists(two + "/model.safetensors"));
  EXPECT_EQ(fs::file_size(four + "/model.safetensors"), 20u);
  fs::remove_all(dir);
}

TEST(Resume, another_runs_checkpoint_is_refused_with_how_to_take_it_on_purpose) {
  std::string dir = tempDir();
  std::string other = saveCheckpoint(dir, sample(100, runA()));
  try {
    pickResumeCheckpoint({dir, "", true, runB()});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(
        m.find(
            "ckpt-100 (it was trained with another config (config hash 0000000a, this run's is 0000000b))"),
        std::string::npos)
        << m;
    EXPECT_NE(m.find("--resume-from " + other), std::string::npos) << m;
  }
  // A restarted worker (not --resume) starts afresh with the same note instead.
  ResumePick p = pickResumeCheckpoint({dir, "", false, runB()});
  EXPECT_FALSE(p.data.has_value());
  ASSERT_FALSE(p.notes.empty());
  EXPECT_NE(p.notes.back().find("starting from scratch"), std::string::npos) << p.notes.back();
  // Another seed is another run too; another world size is compatible (elastic resume).
  RunIdentity seed = runA();
  seed.seed = 8;
  EXPECT_NE(incompatibility(runA(), seed).find("seed 7"), std::string::npos);
  RunIdentity world = runA();
  world.world_size = 4;
  world.run_id = "cccccccccccccccc";
  EXPECT_EQ(incompatibility(runA(), world), "");
  // On purpose: --resume-from takes it, and says whose it is.
  p = pickResumeCheckpoint({dir, other, true, runB()});
  ASSERT_TRUE(p.data.has_value());
  EXPECT_EQ(p.data->step, 100);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("resuming on purpose"), std::string::npos) << p.notes[0];
  fs::remove_all(dir);
}

TEST(Resume, resume_from_a_corrupt_checkpoint_names_the_file) {
  std::string dir = tempDir();
  std::string path = saveCheckpoint(dir, sample(5));
  fs::resize_file(path + "/optimizer.safetensors", 20);
  try {
    pickResumeCheckpoint({dir, path, true, runA()});
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(path + "/optimizer.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pickResumeCheckpoint({dir, dir + "/nothing-here", true, runA()}), IoError);
  fs::remove_all(dir);
}
