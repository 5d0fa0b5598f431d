#pragma once
// Partitioned ZeRO checkpoints (docs/checkpoints.md, "Partitioned checkpoints"). A ZeRO run's
// checkpoint is written by every rank at once, nothing gathered:
//   ckpt-<step>/zero/rank-<r>-of-<N>.safetensors  rank r's elements of the parameters and of each
//                                                 optimizer state buffer, one tensor per segment,
//                                                 the segment map in __metadata__
//   ckpt-<step>/model_buffers.safetensors        the model's state dict less its parameters
//   ckpt-<step>/state.json, config.json           as a DDP checkpoint's (rank 0)
//   ckpt-<step>/manifest.json                     rank 0, last, once every rank's file is complete
// and loaded by any world size and stage, DDP included: each rank reads the parameters whole (the
// model holds them whole at load, stage 3 as for a forward) but of the optimizer states only the
// byte ranges of the elements it owns (a DDP rank: all of them).
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/nn/module.h"
#include "lockstep/nn/state_dict.h"
#include "lockstep/parallel/zero/optimizer.h"
#include "lockstep/train/checkpoint/checkpoint.h"
#include "lockstep/train/checkpoint/safetensors_reader.h"
#include "lockstep/train/checkpoint/training_state.h"

namespace lockstep::train {

/// Collective over group (null: one rank): every rank writes its own partition file (fsynced) into
/// the checkpoint's temp directory, sends rank 0 its size and CRC-32, and rank 0 writes
/// `replicated`'s files (captureTrainingState's with TrainingParts::zero set: buffers, state,
/// config, identity, step) and then the manifest, and moves the checkpoint into place
/// (checkpoint.h's rules). checkpoint dir must be one filesystem that every rank sees. A failure on
/// any rank is an IoError on every rank, and `latest` still names the previous checkpoint.
/// Returns the checkpoint's path.
std::string saveZeroCheckpoint(const std::string& dir, const CheckpointData& replicated,
                               const parallel::ZeroOptimizer& zero, comm::ProcessGroup* group,
                               const CheckpointOptions& opts);

/// One run of a parameter's elements in a partition file, with its optimizer state.
struct PartitionSegment {
  /// The parameter's index in the whole model's optimizer numbering (the flat order of a DDP run's
  /// optimizer), its state-dict name and whole shape.
  size_t param = 0;
  std::string name;
  Shape shape;
  /// Elements [offset, offset + numel) of it, and its optimizer state buffers over those elements
  /// ("exp_avg", ...; "step" a scalar).
  int64_t offset = 0, numel = 0;
  Tensor values;
  std::vector<std::pair<std::string, Tensor>> state;
};

/// What one rank writes of a partitioned checkpoint.
struct CheckpointPartition {
  /// Its name in the checkpoint ("zero/rank-00000-of-00002.safetensors",
  /// "pipeline/stage-00001-of-00002.safetensors").
  std::string file;
  /// The whole model's parameter count.
  int64_t parameters = 0;
  /// Extra __metadata__ entries (rank, world_size, stage).
  std::map<std::string, std::string> metadata;
  std::vector<PartitionSegment> segments;
};

/// saveZeroCheckpoint's mechanics for any split of the parameters over ranks (a pipeline's stages):
/// collective over group; the ranks with a partition write it, and between them every parameter's
/// elements must be written exactly once. The manifest's "zero" record lists the files written (any
/// partitioned checkpoint loads by ZeroCheckpointReader, whatever wrote it) and `layout_extra`'s keys
/// are added beside it ({"pipeline": ...}).
std::string savePartitionedCheckpoint(const std::string& dir, const CheckpointData& replicated,
                                      const std::optional<CheckpointPartition>& mine, int zero_stage,
                                      const nlohmann::json& layout_extra, comm::ProcessGroup* group,
                                      const CheckpointOptions& opts);

/// A loaded checkpoint's model state dict, whatever wrote it: a partitioned one's parameters put
/// together from its files (ZeroCheckpointReader) and its buffers; a DDP one's model as saved.
NamedTensors checkpointModelState(const CheckpointData& data);

/// restoreTrainingState for ZeRO stage 3 whose parameters are partitioned now (collective): the
/// optimizer's parameters are loaded one gathered bucket at a time (ZeroOptimizer::
/// forEachParameterBucketWhole: their values read from the checkpoint, partitioned or whole, and
/// taken into each rank's partition with adoptParameters), so the whole model is never resident
/// on a rank or its GPU; the rest (buffers, the optimizer's partition, schedule, data position) as
/// restoreTrainingState loads it. Returns its note. ValueError naming a parameter the checkpoint
/// lacks or holds in another shape.
std::string restoreTrainingStateByBucket(const CheckpointData& data, TrainingParts& parts);

/// checkpointModelState(data) written to one safetensors file at path (atomically), never whole in
/// memory: a partitioned checkpoint's parameters are read (by byte range) and written one at a
/// time. floating_as: floating tensors cast to that dtype (zero_to_fp32's f32). The same file as
/// saveSafetensors(path, checkpointModelState(data), metadata) would write.
void saveCheckpointModel(const CheckpointData& data, const std::string& path,
                         const std::map<std::string, std::string>& metadata,
                         std::optional<DType> floating_as = std::nullopt);

/// The partition files of a loaded (verified) partitioned checkpoint, opened by their headers.
/// Not thread-safe.
class ZeroCheckpointReader {
 public:
  /// data: loadCheckpoint's, with data.zero set. Reads every rank file's header and segment map
  /// and checks that the segments tile each parameter exactly. IoError naming the file otherwise.
  explicit ZeroCheckpointReader(const CheckpointData& data);

  /// Every parameter's whole values by its name in the model's state dict; with `wanted`, only
  /// those whose name it accepts (the others are not read).
  NamedTensors parameters(const std::function<bool(const std::string& name)>& wanted = {}) const;
  /// Every parameter's name, shape and dtype, in parameters()'s order (nothing read).
  std::vector<SafetensorsEntry> parameterLayout() const;
  /// The whole optimizer state as a DDP run's optimizer holds it ("<index>.<key>", each buffer
  /// shaped like its parameter, "step" a scalar): what Optimizer::loadStateDict takes. With
  /// `wanted`, only the parameters whose index it accepts (the others are not read).
  nn::StateDict optimizerState(const std::function<bool(int64_t index)>& wanted = {}) const;
  /// Only this ZeRO rank's elements of the optimizer state (ZeroOptimizer::loadPartitionStateDict's
  /// input), read by byte range. ValueError when the checkpoint's parameters are not model's (by
  /// model's current names: Module::currentKey).
  nn::StateDict partitionState(const parallel::ZeroOptimizer& zero, const nn::Module& model) const;

 private:
  struct Segment {
    size_t file = 0;
    int64_t offset = 0, numel = 0;
    std::string tensor;  // the values' tensor; a state buffer's is tensor + "/" + key
  };
  struct Param {
    std::string name;
    Shape shape;
    DType dtype = DType::f32;
    std::vector<Segment> segments;  // by offset, tiling [0, numel)
    std::vector<std::string> keys;  // optimizer state buffers any segment has
  };
  // Elements [begin, begin + count) of parameter p's values (key "") or state buffer `key` into
  // dst; zeros where a segment has no such buffer.
  /// The dtype of p's tensors of `key` ("" the values; a state's: the parameter's, or f32 beside
  /// 16-bit parameters), as the first rank file holding one says; p.dtype when none does.
  DType dtypeOf(const Param& p, const std::string& key) const;
  /// Elements [begin, begin + count) of p's `key` into dst, in dtypeOf(p, key) (IoError when a rank
  /// file's tensor has another); zeros where no file holds them.
  void readRange(const Param& p, const std::string& key, int64_t begin, int64_t count, char* dst) const;
  Tensor readStep(const Param& p) const;

  std::string path_;
  std::vector<SafetensorsReader> files_;
  std::vector<Param> params_;  // by parameter index (the optimizer's order)
};

}  // namespace lockstep::train
