// Partitioned ZeRO checkpoints at the library level, ranks as threads: what each rank's file holds
// and what each rank reads back on another world size and stage, against the consolidated state.
#include "lockstep/train/checkpoint/zero_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "lockstep/train/checkpoint/checkpoint.h"
#include "lockstep/train/checkpoint/training_state.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"
#include "parallel/zero_engine_helpers.h"

using namespace lockstep;
using namespace lockstep::testing::zero;
namespace fs = std::filesystem;

namespace {

struct Saved {
  std::string path;
  nn::StateDict model;              // gathered after the steps
  optim::OptimizerStateDict state;  // consolidated
};

std::string scratch(const char* name) {
  const std::string dir =
      (fs::temp_directory_path() / ("lockstep-zckpt-" + std::to_string(::getpid()) + name)).string();
  fs::remove_all(dir);
  return dir;
}

EngineOptions withStage(EngineOptions o, int stage) {
  o.zero_stage = stage;
  o.zero.reduce_bucket_size = 30;  // several buckets: a rank owns several runs
  return o;
}

// Two Adam steps on `world` ranks at `stage`, then a partitioned checkpoint of step 2 under dir.
Saved trainAndSave(const EngineOptions& opt, int world, int stage, const std::string& dir,
                   const std::function<std::shared_ptr<nn::Module>(uint64_t)>& net = makeNet) {
  Saved out;
  lockstep::testing::runThreadRanks(world, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    Engine engine(net(7), withStage(opt, stage), worldOf(rank, world, pg));
    for (int s = 0; s < 2;) {
      auto [x, y] = batch(s * world + rank, kRows);
      engine.backward(autograd::crossEntropy(engine.forward(Variable(x)), y));
      if (engine.step()) ++s;
    }
    train::TrainingParts parts;
    parts.model = engine.model().get();
    parts.optimizer = engine.optimizer().get();
    parts.zero = engine.zero();
    train::CheckpointData d = train::captureTrainingState(parts, 2);
    const std::string path = train::saveZeroCheckpoint(dir, d, *engine.zero(), pg.get(), {});
    optim::OptimizerStateDict state = engine.zero()->consolidatedStateDict();
    engine.zero()->gatherParameters();
    if (rank == 0) {
      out.path = path;
      out.model = engine.model()->stateDict().cloned();
      out.state.state = state.state.cloned();
    }
  });
  return out;
}

void expectEqual(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_EQ(a.toVector<double>(), b.toVector<double>()) << what;
}

}  // namespace

// Adam (exp_avg, exp_avg_sq, step) and SGD with momentum (momentum_buffer).
class ZeroCheckpoint : public ::testing::TestWithParam<const char*> {
 protected:
  EngineOptions optimizer() const { return std::string(GetParam()) == "Adam" ? adam() : sgd(); }
  std::vector<const char*> buffers() const {
    if (std::string(GetParam()) == "Adam") return {"exp_avg", "exp_avg_sq"};
    return {"momentum_buffer"};
  }
};

TEST_P(ZeroCheckpoint, each_rank_writes_its_elements_and_reads_back_only_its_own_on_another_world) {
  const std::string dir = scratch(GetParam());
  const Saved saved = trainAndSave(optimizer(), 2, 3, dir);
  ASSERT_EQ(saved.path, dir + "/ckpt-2");
  // Every parameter element is in exactly one of the two files, with Adam's two buffers.
  int64_t elements = 0;
  for (int r = 0; r < 2; ++r) {
    auto f =
        train::loadSafetensors(dir + "/ckpt-2/zero/rank-0000" + std::to_string(r) + "-of-00002.safetensors");
    EXPECT_EQ(f.metadata["rank"], std::to_string(r));
    for (const auto& [name, t] : f.tensors)
      if (name.find('/') == std::string::npos) elements += t.numel();
  }
  EXPECT_EQ(elements, 74);
  EXPECT_EQ(saved.state.state.size(), 4 * (buffers().size() + (buffers().size() == 2)));  // + Adam's step

  const train::CheckpointData d = train::loadCheckpoint(saved.path);
  ASSERT_FALSE(d.zero.is_null());
  EXPECT_TRUE(d.optimizer.empty());
  // A reader with no ZeRO (DDP, or consolidate) gets the whole model and state, bitwise.
  const train::ZeroCheckpointReader reader(d);
  for (const auto& [name, t] : reader.parameters()) expectEqual(t, saved.model.at(name), name);
  // Written to one model file a parameter at a time: checkpointModelState's tensors, bitwise, and
  // as f64 when asked (consolidate's cast).
  for (std::optional<DType> as : {std::optional<DType>{}, std::optional<DType>{DType::f64}}) {
    const std::string file = dir + "/model.safetensors";
    train::saveCheckpointModel(d, file, {{"format", "pt"}}, as);
    const auto written = train::loadSafetensors(file);
    EXPECT_EQ(written.metadata.at("format"), "pt");
    const train::NamedTensors expected = train::checkpointModelState(d);
    ASSERT_EQ(written.tensors.size(), expected.size());
    for (const auto& [name, t] : expected) {
      auto it = std::find_if(written.tensors.begin(), written.tensors.end(),
                             [&](const auto& e) { return e.first == name; });
      ASSERT_NE(it, written.tensors.end()) << name;
      EXPECT_EQ(it->second.shape(), t.shape()) << name;
      EXPECT_EQ(it->second.dtype(), as && isFloating(t.dtype()) ? *as : t.dtype()) << name;
      expectEqual(it->second, t, name);
    }
  }
  const nn::StateDict whole = reader.optimizerState();
  EXPECT_EQ(whole.size(), saved.state.state.size());
  for (const auto& [key, t] : saved.state.state) expectEqual(whole.at(key), t, key);

  // Three ranks at stage 1 and at stage 3: each reads its own elements, which are the slices of the
  // consolidated state; loaded, the ZeRO optimizer consolidates to the saved state bitwise.
  for (int stage : {1, 3}) {
    lockstep::testing::runThreadRanks(3, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
      Engine engine(makeNet(8), withStage(optimizer(), stage), worldOf(rank, 3, pg));
      parallel::ZeroOptimizer& zero = *engine.zero();
      const nn::StateDict mine = train::ZeroCheckpointReader(d).partitionState(zero, *engine.model());
      int64_t held = 0;
      for (const auto& s : zero.ownedSegments()) {
        for (const char* key : buffers()) {
          const std::string k = std::to_string(s.param) + "." + key;
          const Tensor& full = saved.state.state.at(k);
          expectEqual(mine.at(k), full.contiguous().view({full.numel()}).narrow(0, s.param_offset, s.numel),
                      k);
          held += mine.at(k).numel();
        }
      }
      int64_t total = 0;
      for (const auto& [k, t] : mine) total += k.find(".step") == std::string::npos ? t.numel() : 0;
      EXPECT_EQ(total, held) << "rank " << rank << " holds more than its partition";
      train::TrainingParts parts;
      parts.model = engine.model().get();
      parts.optimizer = engine.optimizer().get();
      parts.zero = &zero;
      zero.gatherParameters();
      train::restoreTrainingState(d, parts);
      zero.adoptGatheredParameters();
      zero.releaseParameters();
      const optim::OptimizerStateDict back = zero.consolidatedStateDict();
      for (const auto& [key, t] : saved.state.state) expectEqual(back.state.at(key), t, key);
      zero.gatherParameters();
      for (const auto& [name, t] : saved.model) expectEqual(engine.model()->stateDict().at(name), t, name);
    });
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ZeroCheckpoint, ::testing::Values("Adam", "SGD"));

TEST(ZeroCheckpointResume, stage3_loads_one_gathered_bucket_at_a_time_and_equals_a_whole_load) {
  // A stage-3 checkpoint of 2 ranks resumed by stage 3 on 3 ranks, layer by layer: at no point are
  // more than two buckets of parameters whole (the one loading and the next one's gather), and the
  // partition ends as the whole load (gather everything, load, adopt) leaves it, bitwise.
  const std::string dir = scratch("resume3");
  auto deep = makeDeepNet;  // six Linear layers: six gather units
  const Saved saved = trainAndSave(adam(), 2, 3, dir, deep);
  const train::CheckpointData d = train::loadCheckpoint(saved.path);
  lockstep::testing::runThreadRanks(3, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    EngineOptions o = withStage(perLayer(adam()), 3);
    o.zero.reduce_bucket_size = 12;  // many buckets
    auto parts = [](Engine& e) {
      train::TrainingParts p;
      p.model = e.model().get();
      p.optimizer = e.optimizer().get();
      p.zero = e.zero();
      return p;
    };
    Engine by_bucket(deep(8), o, worldOf(rank, 3, pg));
    train::TrainingParts pb = parts(by_bucket);
    parallel::ZeroParameterCoordinator& coordinator = *by_bucket.zero()->coordinator();
    coordinator.resetPeakLive();
    int64_t total = 0, largest = 0, second = 0;
    for (const auto& b : by_bucket.zero()->layout().buckets) {
      total += b.numel;
      second = std::max(second, std::min(largest, b.numel));
      largest = std::max(largest, b.numel);
    }
    train::restoreTrainingStateByBucket(d, pb);
    EXPECT_GT(coordinator.fetchStats().peak_live, 0);
    EXPECT_LE(coordinator.fetchStats().peak_live, largest + second) << "rank " << rank;
    EXPECT_LT(largest + second, total);
    EXPECT_FALSE(by_bucket.zero()->parametersGathered());
    // The whole load: every parameter gathered, loaded, adopted.
    Engine whole(deep(9), o, worldOf(rank, 3, pg));
    train::TrainingParts pw = parts(whole);
    whole.zero()->gatherParameters();
    train::restoreTrainingState(d, pw);
    whole.zero()->adoptGatheredParameters();
    whole.zero()->releaseParameters();
    const auto a = by_bucket.zero()->ownedSegments(), b = whole.zero()->ownedSegments();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      expectEqual(a[i].values, b[i].values, "segment " + std::to_string(i));
    const optim::OptimizerStateDict sa = by_bucket.zero()->consolidatedStateDict(),
                                    sb = whole.zero()->consolidatedStateDict();
    for (const auto& [key, t] : sb.state) expectEqual(sa.state.at(key), t, key);
    by_bucket.zero()->gatherParameters();
    for (const auto& [name, t] : saved.model) expectEqual(by_bucket.model()->stateDict().at(name), t, name);
  });
  fs::remove_all(dir);
}

TEST(ZeroCheckpointSave, a_save_that_fails_on_rank_0_is_an_error_on_every_rank) {
  const std::string dir = scratch("fail");
  trainAndSave(adam(), 2, 2, dir);  // ckpt-2, latest
  // The next save cannot make its temp directory (a file is in the way): every rank gets rank 0's
  // error and none waits forever; the checkpoints already there stay.
  std::ofstream(dir + "/blocker") << "x";
  std::vector<std::string> errors(2);
  lockstep::testing::runThreadRanks(2, [&](int rank, std::shared_ptr<comm::ProcessGroup> pg) {
    Engine engine(makeNet(7), withStage(adam(), 2), worldOf(rank, 2, pg));
    train::TrainingParts parts;
    parts.model = engine.model().get();
    parts.optimizer = engine.optimizer().get();
    parts.zero = engine.zero();
    try {
      train::saveZeroCheckpoint(dir + "/blocker/sub", train::captureTrainingState(parts, 3), *engine.zero(),
                                pg.get(), {});
    } catch (const IoError& e) {
      errors[rank] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) EXPECT_NE(errors[r].find(dir + "/blocker/sub"), std::string::npos) << errors[r];
  EXPECT_EQ(*train::latestCheckpoint(dir), dir + "/ckpt-2");
  fs::remove_all(dir);
}

namespace {
// Rewrites a checkpoint's manifest through `edit` with its CRC-32 made to match again (a forgery
// the checksums cannot catch: what the readers' own checks must).
void forgeManifest(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(file::readAll(path + "/manifest.json"));
  edit(j["manifest"]);
  j["crc32"] = file::crc32(j["manifest"].dump());
  std::ofstream(path + "/manifest.json", std::ios::trunc) << j.dump(2);
}

// Rewrites a partition file's __metadata__ through `edit` and records its new size and CRC-32.
void forgePartition(const std::string& path, const std::string& name,
                    const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = file::readAll(path + "/" + name);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, n));
  nlohmann::json meta = header["__metadata__"];
  edit(meta);
  header["__metadata__"] = meta;
  const std::string h = header.dump();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  out += h + bytes.substr(8 + n);
  std::ofstream(path + "/" + name, std::ios::binary | std::ios::trunc) << out;
  forgeManifest(path, [&](nlohmann::json& m) { m["files"][name] = train::checkpointFileRecord(out); });
}

std::string readError(const std::string& path) {
  try {
    train::ZeroCheckpointReader reader(train::loadCheckpoint(path));
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

// Forged manifests and partition files (their checksums made to match) that the reader took:
// a rank file listed twice (elements held twice), a rank file outside the checkpoint, a parameter
// count that sized a table of 10^9 entries (std::bad_alloc), a shape whose product wraps.
TEST(ZeroCheckpointRead, forged_rank_files_and_partition_metadata_are_refused) {
  const std::string dir = scratch("forged");
  const Saved saved = trainAndSave(adam(), 2, 2, dir);
  const std::string copy = dir + "/copy";
  auto fresh = [&] {
    fs::remove_all(copy);
    fs::copy(saved.path, copy, fs::copy_options::recursive);
  };
  fresh();
  ASSERT_EQ(readError(copy), "");
  std::vector<std::string> files;
  forgeManifest(copy,
                [&](nlohmann::json& m) { files = m["zero"]["rank_files"].get<std::vector<std::string>>(); });
  ASSERT_EQ(files.size(), 2u);

  forgeManifest(copy, [&](nlohmann::json& m) {
    m["zero"]["rank_files"] = {files[0], files[1], files[1]};
    m["zero"]["world_size"] = 3;
  });
  EXPECT_NE(readError(copy).find("exactly once"), std::string::npos) << readError(copy);

  fresh();
  fs::copy_file(copy + "/" + files[1], dir + "/outside.safetensors");
  forgeManifest(copy, [&](nlohmann::json& m) {
    m["files"]["../outside.safetensors"] = m["files"][files[1]];
    m["zero"]["rank_files"] = {files[0], "../outside.safetensors"};
  });
  EXPECT_NE(readError(copy).find("'../outside.safetensors', which is not inside the checkpoint"),
            std::string::npos)
      << readError(copy);

  fresh();
  forgePartition(copy, files[0], [](nlohmann::json& meta) { meta["parameters"] = "1000000000"; });
  forgePartition(copy, files[1], [](nlohmann::json& meta) { meta["parameters"] = "1000000000"; });
  EXPECT_NE(readError(copy).find("bad parameter count 1000000000"), std::string::npos) << readError(copy);

  fresh();
  forgePartition(copy, files[0], [](nlohmann::json& meta) {
    nlohmann::json segments = nlohmann::json::parse(meta["segments"].get<std::string>());
    segments[0]["shape"] = {int64_t{4611686018427387905}, 4};  // wraps to 4 elements
    meta["segments"] = segments.dump();
  });
  EXPECT_NE(readError(copy).find("which no tensor has"), std::string::npos) << readError(copy);
  fs::remove_all(dir);
}
