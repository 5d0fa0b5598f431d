// `lockstep checkpoint consolidate DIR OUT.safetensors`: one safetensors file of f32 weights from a
// training checkpoint (DeepSpeed's zero_to_fp32.py). DIR is one checkpoint (ckpt-<step>) or a
// directory of them (its `latest`, else the newest one that verifies). A DDP checkpoint holds whole
// tensors; a ZeRO run's is partitioned (train/checkpoint/zero_checkpoint.h), and a pipeline run's
// per stage (pipeline_checkpoint.h): each parameter is put together from the ranks' or the stages'
// files. Either way the weights are written as f32, atomically, with the model's
// names.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "lockstep/cli/command.h"
#include "lockstep/train/checkpoint/checkpoint.h"
#include "lockstep/train/checkpoint/safetensors.h"
#include "lockstep/train/checkpoint/zero_checkpoint.h"
#include "lockstep/util/error.h"
#include "lockstep/util/file.h"

namespace {

namespace fs = std::filesystem;
using namespace lockstep;

// The checkpoint DIR names: itself when it has a manifest, else DIR/latest, else the newest that
// verifies. IoError naming DIR when there is none.
std::string pickCheckpoint(const std::string& dir) {
  if (file::exists(dir + "/manifest.json")) return dir;
  if (auto latest = train::latestCheckpoint(dir)) return *latest;
  for (const std::string& c : train::listCheckpoints(dir)) {
    try {
      train::verifyCheckpoint(c);
      return c;
    } catch (const IoError&) {
    }
  }
  throw IoError("'" + dir + "' is neither a checkpoint (no manifest.json) nor a directory holding one " +
                "(no latest, no ckpt-<step> that verifies); pass a training run's checkpoints/ directory");
}

int consolidate(const std::string& dir, const std::string& out) {
  const std::string path = pickCheckpoint(dir);
  // OUT inside the checkpoint would replace one of its files (model.safetensors) or add one its
  // manifest does not list: either way the checkpoint would no longer verify.
  std::error_code ec_ckpt, ec_out;
  const fs::path ckpt = fs::weakly_canonical(path, ec_ckpt), target = fs::weakly_canonical(out, ec_out);
  if (!ec_ckpt && !ec_out && !ckpt.empty()) {
    const auto [c, t] = std::mismatch(ckpt.begin(), ckpt.end(), target.begin(), target.end());
    if (c == ckpt.end())
      throw ValueError("OUT '" + out + "' is inside the checkpoint it reads (" + path +
                       "): writing there would spoil the checkpoint; give a path outside it");
    // Nor another checkpoint beside it, its `latest`, or a save under way there.
    const fs::path beside = target.lexically_relative(ckpt.parent_path());
    const std::string first = beside.empty() ? "" : beside.begin()->string();
    if (!first.empty() && first != ".." &&
        (first == "latest" || first.rfind("ckpt-", 0) == 0 || first[0] == '.'))
      throw ValueError("OUT '" + out + "' is among the checkpoints beside " + path + " (" + first +
                       "): writing there would spoil one of them; give a path outside " +
                       ckpt.parent_path().string());
  }
  train::CheckpointData d = train::loadCheckpoint(path);
  // One parameter in memory at a time (a partitioned checkpoint of a model larger than memory).
  // format pt: what Hugging Face's from_pretrained requires of a safetensors file's metadata.
  train::saveCheckpointModel(d, out, {{"format", "pt"}, {"source", path}, {"step", std::to_string(d.step)}},
                             DType::f32);
  const size_t tensors = d.zero.is_null()
                             ? d.model.size()
                             : train::ZeroCheckpointReader(d).parameterLayout().size() + d.model.size();
  std::printf("wrote %s: %zu tensors of %s (step %lld)\n", out.c_str(), tensors, path.c_str(),
              static_cast<long long>(d.step));
  return 0;
}

int checkpointMain(int argc, char** argv) {
  CLI::App app{"Work with training checkpoints", "lockstep checkpoint"};
  app.require_subcommand(1);
  std::string dir, out;
  CLI::App* c = app.add_subcommand(
      "consolidate", "write a checkpoint's model as one safetensors file of f32 weights (zero_to_fp32)");
  c->add_option("dir", dir, "a checkpoint (ckpt-<step>) or a directory of them (its latest)")->required();
  c->add_option("out", out, "the .safetensors file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    return consolidate(dir, out);
  } catch (const Error& e) {
    std::fprintf(stderr, "lockstep checkpoint consolidate: error: %s\n", e.what());
    return 2;
  }
}

static cli::Registration reg{"checkpoint", "consolidate a training checkpoint into one safetensors file",
                             &checkpointMain};

}  // namespace
